"""What a node actor's code prints, kept as lines of the node's log (``output.log``).

A simulator that prints (``print(...)``, a progress bar on stderr, a Python warning) writes to
the actor process's ``sys.stdout`` / ``sys.stderr``. Ray would forward those to the driver's
terminal, prefixed ``(RunNodeWrapper pid=…)`` and in colour even into a file; a launch turns
that forwarding off and :func:`capture_prints` replaces both streams of the actor process (one
process per actor, running that node only) by :class:`LineWriter`\\ s that hand each complete
line to the node's log buffer as ``<time> INFO stdout: <line>`` (``stderr`` likewise).

A carriage return keeps only what follows it (a progress bar redrawn in place becomes its last
state when the line ends); a line longer than :data:`MAX_LINE` characters is cut into parts.
Output written to the file descriptors directly (C code, a subprocess) is not seen here.

A Python warning is no print: :func:`capture_warnings` makes it a ``WARNING`` record of the
``py.warnings`` logger, ``<Category>: <message>``, which goes to ``output.log`` and, as every
``WARNING`` record of a node actor, to the driver's console.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import TextIO

__all__ = ["LineWriter", "capture_prints", "capture_warnings", "MAX_LINE"]

#: characters of an unfinished line kept before it is handed on as it is
MAX_LINE = 10_000


def _stamp(t: float) -> str:
    """The time as the log's records show it (``2026-01-31 12:00:00,123``)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


class LineWriter(io.TextIOBase):
    """A text stream that hands its complete lines to ``keep`` (a list of log lines per call).

    Args:
        keep: receives ``["<time> INFO <name>: <line>", …]``.
        name: ``"stdout"`` or ``"stderr"``.
    """

    def __init__(self, keep: Callable[[list[str]], None], name: str):
        super().__init__()
        self._keep = keep
        self.name = name
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            *lines, partial = (self._partial + text).split("\n")
            redrawn = partial.rfind("\r", 0, len(partial) - 1)
            if redrawn >= 0:  # a line redrawn in place: its last state
                partial = partial[redrawn + 1 :]
            if len(partial) > MAX_LINE:
                lines.append(partial)
                partial = ""
            self._partial = partial
        if lines:
            stamp = _stamp(time.time())
            self._keep([f"{stamp} INFO {self.name}: {_last_state(line)}" for line in lines])
        return len(text)

    def flush(self) -> None:
        """Nothing to flush: an unfinished line waits for its end (or :meth:`close`)."""

    def close(self) -> None:
        with self._lock:
            partial, self._partial = self._partial, ""
        if partial:
            self._keep([f"{_stamp(time.time())} INFO {self.name}: {_last_state(partial)}"])
        super().close()


def _last_state(line: str) -> str:
    """What a terminal would show of ``line``: the text after its last carriage return."""
    line = line.rstrip("\r")
    return line.rsplit("\r", 1)[-1]


def capture_prints(keep: Callable[[list[str]], None]) -> None:
    """Replace ``sys.stdout`` and ``sys.stderr`` of this (actor) process by :class:`LineWriter`\\ s
    handing their lines to ``keep``; a second call (a reopened log) replaces the receiver."""
    for name in ("stdout", "stderr"):
        current = getattr(sys, name)
        if isinstance(current, LineWriter):
            current._keep = keep
        else:
            setattr(sys, name, LineWriter(keep, name))


def _log_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    logging.getLogger("py.warnings").warning("%s: %s", category.__name__, message)


def capture_warnings() -> Callable[..., None]:
    """Show this (actor) process's Python warnings as ``WARNING`` records of the
    ``py.warnings`` logger (one line, ``<Category>: <message>``, no file path or source line);
    returns the ``warnings.showwarning`` it replaced."""
    previous = warnings.showwarning
    warnings.showwarning = _log_warning
    return previous
