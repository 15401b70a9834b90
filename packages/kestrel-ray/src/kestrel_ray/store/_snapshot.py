"""The Ray store's whole buffer to a snapshot on the driver, and back into a new store.

A launch that stops reads every readable row of the store actor on the driver
(:func:`snapshot_store`: one checkout, batched ``ray.get`` s of the blocks — one per
:func:`~kestrel_ray.store._read_budget.read_budget` bytes — through the
:class:`~kestrel_ray.StoreHandle`) and writes ``buffer.npz``
(:func:`kestrel_core.store.write_buffer_file`); a resumed launch reads the file and
:func:`restore_store` puts the rows into its new store actor: the driver ``ray.put`` s one
object per key (the driver owns them, as it owns every simulated block) and the store keeps
their refs with the rows' old ids and statuses (:meth:`kestrel_core.store.BlockStore.restore`).
"""

from __future__ import annotations

import numpy as np
import ray

from kestrel_core import BlockMeta
from kestrel_core.store import BufferSnapshot, take_snapshot
from kestrel_ray.store._handle import StoreHandle
from kestrel_ray.store._read_budget import read_budget

__all__ = ["snapshot_store", "restore_store"]


def snapshot_store(store: StoreHandle) -> BufferSnapshot | None:
    """Every readable row of the store with its id and status; ``None`` before the first append.

    Raises:
        StoreError: the store did not answer, or a stored block is lost.
    """
    schema = store.schema()
    if not schema:
        return None
    return take_snapshot(
        store,
        sorted(schema),
        store.wait,
        schema=schema,
        max_bytes=read_budget(),
    )


def restore_store(store: StoreHandle, snapshot: BufferSnapshot) -> int:
    """Put the rows of ``snapshot`` into ``store`` (an empty one); returns how many.

    Raises:
        StoreError: the rows do not fit the store (key schema, ids); nothing is stored.
    """
    arrays = {k: np.ascontiguousarray(a) for k, a in snapshot.arrays.items()}
    block = {k: ray.put(a) for k, a in arrays.items()}
    meta = BlockMeta.of(arrays, snapshot.n)
    return store.restore(block, meta, snapshot.ids, snapshot.statuses, next_id=snapshot.next_id)
