"""Writing ``.npz`` files byte for byte reproducibly.

``numpy.savez`` stamps each member with the current time, so two runs with the same seed give
different files. :func:`save_npz` writes the same format (readable by :func:`numpy.load`) with
a fixed timestamp and in the given key order, through a ``<path>.tmp`` renamed into place (removed
when the write fails); with
``durable=True`` the file and the rename are fsynced (:func:`fsync_dir`), so a crash right
after leaves the whole file or the old one.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core.files._diskfull import disk_full_guard

__all__ = ["save_npz", "fsync_dir"]

_EPOCH = (1980, 1, 1, 0, 0, 0)


def save_npz(
    path: str | os.PathLike[str], arrays: Mapping[str, Any], *, durable: bool = False
) -> str:
    """Write ``arrays`` to an uncompressed ``.npz`` whose bytes depend only on the arrays.

    Args:
        path: file to write; ``.npz`` is appended if missing (as :func:`numpy.savez` does);
            parent directories are created.
        arrays: name → array (no pickled objects).
        durable: fsync the file before the rename and its folder after (the buffer snapshot
            and its journal, which a killed process must find whole).

    Returns:
        The path written.

    Raises:
        DiskFullError: the disk is full, the quota spent or the filesystem read-only (naming
            the file and the space left); the ``.tmp`` is removed, an old file stays.
        OSError: the file cannot be written otherwise (the ``.tmp`` is removed too).

    Example:
        >>> import tempfile
        >>> p = save_npz(tempfile.mkdtemp() + "/a", {"x": np.arange(3)})
        >>> np.load(p)["x"].tolist()
        [0, 1, 2]
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    with disk_full_guard(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with disk_full_guard(path, tmp):  # a failed write leaves no .tmp (and the old file)
        with open(tmp, "wb") as raw:
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
                for name, value in arrays.items():
                    info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
                    info.external_attr = 0o644 << 16
                    with zf.open(info, "w", force_zip64=True) as fh:
                        np.lib.format.write_array(fh, np.asanyarray(value), allow_pickle=False)
            if durable:
                raw.flush()
                os.fsync(raw.fileno())
        os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(os.path.abspath(path)))
    return path


def fsync_dir(folder: str) -> None:
    """Make a rename or deletion in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
