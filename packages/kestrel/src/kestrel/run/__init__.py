"""A trained run as a Python object (notebooks): ``kestrel.open_run(RUN)`` → :class:`~._run.Run`."""
