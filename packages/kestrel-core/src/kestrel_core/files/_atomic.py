"""Writing a file so that a reader never sees it half-written."""

from __future__ import annotations

import os
import tempfile

__all__ = ["write_atomic", "read_estimator_file"]


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename.

    The folder is created. An interrupted write leaves the old file, if any, intact.

    Raises:
        OSError: the folder or the file cannot be written.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
