"""The Kestrel application on Ray: ``kestrel launch`` and ``kestrel sample``.

Built on the runtime library one folder up (:class:`~kestrel_ray.DeployedGraph`, the store,
the NodeWrapper boundary); nothing in the library imports this folder. Public names are
re-exported by :mod:`kestrel_ray` (``launch``, ``sample_run``, ``RunResult``, ``RunError``,
``SampleResult``, ``RunDir``). Importing this package does not import ray (the ``kestrel``
command loads :mod:`kestrel_ray.run._commands` for ``--help``).
"""
