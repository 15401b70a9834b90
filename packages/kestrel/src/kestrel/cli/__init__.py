"""The ``kestrel`` command: argument parsing and the sub-commands.

``main(argv)`` runs it and returns the exit status; ``python -m kestrel`` and the ``kestrel``
console script call it.
"""

from kestrel.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
