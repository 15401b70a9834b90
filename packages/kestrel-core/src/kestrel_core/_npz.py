"""Writing ``.npz`` files byte for byte reproducibly.

``numpy.savez`` stamps each member with the current time, so two runs with the same seed give
different files. :func:`save_npz` writes the same format (readable by :func:`numpy.load`) with
a fixed timestamp and in the given key order.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["save_npz"]

_EPOCH = (1980, 1, 1, 0, 0, 0)


def save_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any]) -> str:
    """Write ``arrays`` to an uncompressed ``.npz`` whose bytes depend only on the arrays.

    Args:
        path: file to write; ``.npz`` is appended if missing (as :func:`numpy.savez` does);
            parent directories are created.
        arrays: name → array (no pickled objects).

    Returns:
        The path written.

    Example:
        >>> import tempfile
        >>> p = save_npz(tempfile.mkdtemp() + "/a", {"x": np.arange(3)})
        >>> np.load(p)["x"].tolist()
        [0, 1, 2]
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(value), allow_pickle=False)
    os.replace(tmp, path)
    return path
