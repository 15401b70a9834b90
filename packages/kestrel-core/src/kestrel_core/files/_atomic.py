"""Writing a file so that a reader never sees it half-written."""

from __future__ import annotations

import os
import tempfile

from kestrel_core.files._diskfull import disk_full_guard

__all__ = ["write_atomic", "read_estimator_file"]


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename.

    The folder is created. An interrupted or failed write leaves the old file, if any, intact
    and removes its temporary file.

    Args:
        path: the file. data: its bytes.
        durable: fsync the file before the rename (``False``: a file rewritten every poll,
            such as ``status.json``, whose loss on a crash costs nothing).

    Raises:
        DiskFullError: the disk is full, the quota spent or the filesystem read-only (naming
            the file and the space left).
        OSError: the folder or the file cannot be written otherwise.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    with disk_full_guard(path):
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    with disk_full_guard(path, tmp):
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)


def read_estimator_file(node: str, path: str | os.PathLike[str]) -> bytes:
    """The bytes of ``node``'s saved estimator file (what ``Estimator.load_bytes`` takes).

    Raises:
        EstimatorError: the file cannot be read, naming the node and the path.
    """
    from kestrel_core._errors import EstimatorError

    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as err:
        raise EstimatorError(
            f"node {node!r}: cannot read its saved estimator {os.fspath(path)}: "
            f"{err.strerror or err}"
        ) from err
