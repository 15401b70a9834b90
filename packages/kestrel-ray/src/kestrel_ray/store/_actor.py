"""The sample store actor: kestrel-core's ``BlockStore`` with blocks of ObjectRefs.

Every rule — key schema, ids, statuses, pins, invalid rows, snapshots — is kestrel-core's
:class:`~kestrel_core.store.BlockStore`; this class says only what a block holds: one
``ObjectRef`` per flat key, whose object is an array ``(n, *D_key)``. It is started by
:meth:`~kestrel_ray.StoreHandle.start` (``num_cpus=0``: the store only does bookkeeping), a
synchronous actor whose methods run one at a time, and called only through that handle.

The block dict nesting keeps Ray from resolving the refs: the store only holds them (as a
borrower; the driver that called the simulator owns the objects). Dropping a block's dict once
all its rows are dead and unpinned is what lets Ray free the objects.

The store never reads data, snapshots included: it has no directory (the run directory lives
with the driver, possibly on another machine), so the rows due for a snapshot wait in the store
go back to the driver with the append's answer (``Appended.snapshots``), and the driver's
:class:`~kestrel_ray.StoreHandle` reads those blocks and writes the files.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray

from kestrel_core import BlockMeta, StoreError
from kestrel_core.store import BlockStore, DiskPolicy, Schema

__all__ = ["SampleStore"]


class SampleStore(BlockStore):
    """Ray actor class holding a run's training buffer as block refs.

    Shape symbols: n rows of a block, D_key the per-sample shape of a flat key.

    Args:
        min_samples, max_samples, validation_samples: buffer rules (see :func:`kestrel_core.rotate`).
        snapshot_every: keep every k-th appended sample for a snapshot (0 = never); the driver
            writes them (:attr:`~kestrel_core.store.Appended.snapshots`).
        seed: seed of the random subsets of ``checkout(max_samples=…)``.
        disk: when the buffer trains from disk (``buffer.storage``): blocks beyond the policy's
            cache are dropped from the object store once the journal holds them
            (:meth:`kestrel_core.store.BlockStore.use_disk`); ``None``: every block in memory.

    Raises:
        ConfigError: a rule value is not a count (``max_samples`` ≥ 1).
    """

    returns_snapshots = True

    def __init__(
        self,
        *,
        min_samples: int = 0,
        max_samples: int = 2**62,
        validation_samples: int = 0,
        snapshot_every: int = 0,
        seed: int | None = None,
        disk: DiskPolicy | None = None,
    ) -> None:
        super().__init__(
            min_samples=min_samples,
            max_samples=max_samples,
            validation_samples=validation_samples,
            snapshot_every=snapshot_every,
            snapshot_dir=None,
            seed=seed,
        )
        self._cpu_start = time.process_time()
        if disk is not None:
            self.use_disk(disk)

    def ready(self) -> bool:
        """Return ``True`` once the actor is constructed (used to wait for it)."""
        return True

    def schema(self) -> Schema | None:
        """The run's key schema ``{flat_key: (D_key, dtype)}``, or ``None`` before the first append."""
        return self._schema_copy()

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) the store's process has used since the store was
        constructed: its own cost of the run's bookkeeping (``RUN/profile.json``'s ``cpu_s``)."""
        return time.process_time() - self._cpu_start

    def held_refs(self) -> int:
        """Number of ObjectRefs the store holds (blocks × keys): what keeps objects alive."""
        return sum(len(h) for h in self._handles())

    def open_checkouts(self) -> int:
        """Number of checkouts not yet released."""
        with self._lock:
            return self._index.open_checkouts

    def _accept(self, block: Mapping[str, Any], meta: BlockMeta, spec: Schema) -> dict[str, Any]:
        for key, ref in block.items():
            if not isinstance(ref, ray.ObjectRef):
                raise StoreError(
                    f"append: key {key!r}: the Ray store holds ObjectRefs, got {type(ref).__name__}"
                )
        return dict(block)

    def _read(self, handle: dict[str, Any]) -> dict[str, np.ndarray]:
        raise StoreError("the Ray store never reads its blocks (snapshots are the driver's)")
