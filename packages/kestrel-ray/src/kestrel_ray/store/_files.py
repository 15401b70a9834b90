"""The driver's files of a store: the snapshot rows an append names.

The store actor never touches a disk (the run directory lives with the driver, possibly on
another machine). The per-sample snapshots an append names (``Appended.snapshots``,
``buffer.snapshot_every``), the driver's :class:`~kestrel_ray.StoreHandle` writes through the
:class:`StoreFiles` it holds (shared with its :meth:`~kestrel_ray.StoreHandle.with_options`
copies; a handle sent to an actor has none): :meth:`StoreFiles.write_snapshots`, called by
:meth:`~kestrel_ray.StoreHandle.appended` once the store answered.

(A launch's journal of appends is not written here: the launch loop hands each append the
store accepted to its journal writer itself, :mod:`kestrel.persist._journal`.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kestrel_core.store import write_snapshots

__all__ = ["StoreFiles"]


class StoreFiles:
    """The driver's files of one store: its snapshot folder.

    Args:
        snapshot_dir: where :meth:`write_snapshots` writes (``None``: it writes nothing).

    Attributes:
        snapshot_dir: as given.
    """

    def __init__(self, snapshot_dir: str | None = None) -> None:
        self.snapshot_dir = snapshot_dir

    def write_snapshots(
        self, due: Sequence[tuple[np.ndarray, np.ndarray, Any]], wait: Callable[[list[Any]], Any]
    ) -> int:
        """Write the snapshots an append returned as due (``Appended.snapshots``); returns how many.

        The driver's side of snapshots: the store names the rows, this reads their blocks
        (one batched ``wait``, the handle's) and writes ``<snapshot_dir>/<id>.npz``. A no-op
        without snapshot folder.

        Args:
            due: ``[(ids, rows, block), …]``, ``block`` ``{flat_key: ObjectRef}``.
            wait: refs → their values (:meth:`~kestrel_ray.StoreHandle.wait`).

        Raises:
            OSError: a file cannot be written.
        """
        if self.snapshot_dir is None or not due:
            return 0
        refs = [[block[k] for k in sorted(block)] for _, _, block in due]
        values = wait([ref for group in refs for ref in group])
        pos, written = 0, 0
        for ids, rows, block in due:
            keys = sorted(block)
            arrays = {k: np.asarray(v) for k, v in zip(keys, values[pos : pos + len(keys)])}
            pos += len(keys)
            write_snapshots(self.snapshot_dir, ids, rows, arrays)
            written += len(rows)
        return written
