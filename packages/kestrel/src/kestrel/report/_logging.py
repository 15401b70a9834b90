"""The driver's log of a run: the ``kestrel.run`` logger, writing to ``graph/driver/output.log``.

One file handler per run, removed when the run ends, so two runs in one process never write
into each other's directories. The node actors' logs are :mod:`~kestrel.report._nodelog`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from kestrel.rundir._rundir import RunDir

__all__ = ["driver_logger", "LOGGER_NAME", "FILE_ONLY"]

LOGGER_NAME = "kestrel.run"
#: ``log.error(..., extra=FILE_ONLY)``: a record for the log file only, not the console (a
#: full traceback whose short form the user sees)
FILE_ONLY = {"file_only": True}
_FORMAT = "%(asctime)s %(levelname)s %(message)s"


@contextlib.contextmanager
def driver_logger(run: RunDir, *, console: bool = True) -> Iterator[logging.Logger]:
    """The driver logger of one run, writing to ``graph/driver/output.log`` (appending).

    Args:
        run: the run directory.
        console: also print ``INFO`` lines to stdout (plain messages).
    """
    log = logging.getLogger(LOGGER_NAME)
    log.setLevel(logging.INFO)
    log.propagate = False
    path = os.path.join(run.node_dir("driver"), "output.log")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
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
