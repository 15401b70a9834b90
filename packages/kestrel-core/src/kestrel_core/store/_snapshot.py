"""Buffer snapshots: which appended samples are saved, and how.

With ``buffer.snapshot_every = k > 0`` a store saves every k-th appended sample (1-based
global counter: sample id + 1 a multiple of k) as ``<snapshot_dir>/<sample id:06d>.npz``
holding its per-sample arrays by flat key (no batch axis). Invalid rows are never saved. The
rule needs ids only, so a store reads a block's data only when one of its rows is due.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["snapshot_rows", "write_snapshots"]


def snapshot_rows(ids: np.ndarray, valid: np.ndarray | None, every: int) -> np.ndarray:
    """Rows of a block to snapshot.

    Args:
        ids: int64 ``(n,)``: the block's sample ids.
        valid: bool ``(n,)`` or ``None`` (every row valid).
        every: k (0 saves nothing).

    Returns:
        int64 row indices, ascending.

    Example:
        >>> snapshot_rows(np.arange(2, 7), None, 3).tolist()   # ids 2 and 5
        [0, 3]
    """
    if not every or not len(ids):
        return np.zeros(0, np.int64)
    due = (np.asarray(ids) + 1) % every == 0
    if valid is not None:
        due &= np.asarray(valid, dtype=bool)
    return np.flatnonzero(due)


def write_snapshots(
    directory: str | Path, ids: np.ndarray, rows: np.ndarray, arrays: Mapping[str, np.ndarray]
) -> None:
    """Save rows ``rows`` of a block as ``directory/<ids[row]:06d>.npz`` (directory created).

    Args:
        directory: the snapshot folder.
        ids: int64 ``(n,)``: the block's sample ids.
        rows: the rows to save (from :func:`snapshot_rows`).
        arrays: flat key → array ``(n, *D)``: the block's data.
    """
    if not len(rows):
        return
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for row in np.asarray(rows).tolist():
        sample: dict[str, Any] = {k: np.asarray(a[row]) for k, a in arrays.items()}
        np.savez(directory / f"{int(ids[row]):06d}.npz", **sample)
