"""The driver's log of a run: the ``kestrel.run`` logger, writing to ``graph/driver/output.log``.

One file handler per run, removed when the run ends, so two runs in one process never write
into each other's directories. The node actors' logs are :mod:`~kestrel.report._nodelog`'s.

A log file that cannot be written (a full disk, a quota, a read-only filesystem) stops its
handler at the first failure, said once on stderr (:class:`RunFileHandler`), instead of a
``--- Logging error ---`` traceback per record; the console lines go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from kestrel.rundir._rundir import RunDir
from kestrel_core.internal import as_disk_full, disk_full_guard

__all__ = ["driver_logger", "RunFileHandler", "LOGGER_NAME", "FILE_ONLY"]

LOGGER_NAME = "kestrel.run"
#: ``log.error(..., extra=FILE_ONLY)``: a record for the log file only, not the console (a
#: full traceback whose short form the user sees)
FILE_ONLY = {"file_only": True}
_FORMAT = "%(asctime)s %(levelname)s %(message)s"


@contextlib.contextmanager
def driver_logger(
    run: RunDir, *, console: bool = True, level: str | None = None
) -> Iterator[logging.Logger]:
    """The driver logger of one run, writing to ``graph/driver/output.log`` (appending).

    Args:
        run: the run directory.
        console: also print the records at ``level`` and above to stdout (plain messages).
        level: the config's ``logging.level`` (a :mod:`logging` level name such as ``DEBUG``,
            ``INFO``, ``WARNING``; case-insensitive, checked by the config schema); ``None``:
            ``INFO``. Records below it reach neither the file nor the console.

    Raises:
        DiskFullError: the log's folder cannot be created for lack of space.
    """
    log = logging.getLogger(LOGGER_NAME)
    log.setLevel(logging.getLevelName(level.upper()) if level else logging.INFO)
    log.propagate = False
    path = os.path.join(run.node_dir("driver"), "output.log")
    with disk_full_guard(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    handlers: list[logging.Handler] = [RunFileHandler(path)]
    handlers[0].setFormatter(logging.Formatter(_FORMAT))
    if console:
        stream = _StdoutHandler()
        stream.setFormatter(logging.Formatter("%(message)s"))
        handlers.append(stream)
    for handler in handlers:
        log.addHandler(handler)
    try:
        yield log
    finally:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()


class _StdoutHandler(logging.StreamHandler):
    """Writes to the *current* ``sys.stdout`` (which a live display may have redirected)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "file_only", False):
            return
        self.stream = sys.stdout
        super().emit(record)


class RunFileHandler(logging.FileHandler):
    """A :class:`logging.FileHandler` (UTF-8, appending) that stops at its first failed write.

    A log file on a full disk would otherwise print a ``--- Logging error ---`` traceback for
    every record (a launch logs hundreds). The first failure closes the file, says once on
    stderr which file and why (the space left, for a full disk), and every later record is
    dropped; the other handlers (the console) go on. Other errors of a record (formatting)
    keep :mod:`logging`'s own report.

    Attributes:
        failed: the one-line reason the handler stopped (``None``: it writes).
    """

    def __init__(self, path: str | os.PathLike[str]):
        super().__init__(path, encoding="utf-8")
        self.failed: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        err = sys.exc_info()[1]
        if not isinstance(err, OSError):
            super().handleError(record)
            return
        full = as_disk_full(err, self.baseFilename)
        self.failed = str(full) if full is not None else f"cannot write {self.baseFilename}: {err}"
        try:
            self.close()
        except OSError:  # flushing a full disk fails again: the file is closed anyway
            pass
        print(
            f"kestrel: the log file is no longer written ({self.failed}); "
            "log lines go to the console only",
            file=sys.stderr,
            flush=True,
        )
