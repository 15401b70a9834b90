"""Warnings in the ``kestrel`` command: one clean line each, each distinct message once.

Python shows a warning as ``/path/to/_commands.py:219: ObservationWarning: …`` followed by the
source line that issued it (``  result = sample_run(``): noise to a user of the command line,
who did not write that line. :func:`clean_warnings` wraps the command's entry point
(:func:`kestrel.cli._main.main`) so that, while the command runs, a shown warning is printed to
stderr as ``warning: <message>``, and a message already shown is not shown again. Which
warnings are shown at all is still up to the filters (``-W``, ``PYTHONWARNINGS``); with
``--debug`` (or ``KESTREL_DEBUG=1``) Python's own format, with file and line, is kept. A
library import changes nothing: only the command installs this. It replaces
:func:`warnings.formatwarning` (not ``showwarning``), so that warnings recorded by
``warnings.catch_warnings(record=True)`` (pytest) are still recorded.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence

__all__ = ["clean_warnings", "warning_line"]


def warning_line(message: Warning | str) -> str:
    """``warning: <message>`` (a message of several lines keeps them, indented)."""
    text = str(message).strip() or type(message).__name__
    return "warning: " + text.replace("\n", "\n  ")


def _debug(argv: Sequence[str] | None) -> bool:
    args = sys.argv[1:] if argv is None else argv
    return "--debug" in args or os.environ.get("KESTREL_DEBUG", "") not in ("", "0")


def clean_warnings(main: Callable[..., int]) -> Callable[..., int]:
    """Decorate the command's ``main(argv=None)``: warnings shown as :func:`warning_line`."""

    @functools.wraps(main)
    def wrapper(argv: Sequence[str] | None = None) -> int:
        if _debug(argv):
            return main(argv)
        seen: set[str] = set()
        previous = warnings.formatwarning

        def format_once(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            line: str | None = None,
        ) -> str:
            text = warning_line(message)
            if text in seen:
                return ""  # shown already: nothing written
            seen.add(text)
            return text + "\n"

        warnings.formatwarning = format_once
        try:
            return main(argv)
        finally:
            if warnings.formatwarning is format_once:
                warnings.formatwarning = previous

    return wrapper
