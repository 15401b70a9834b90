"""The :class:`~kestrel_core.BufferView` of an :class:`~kestrel_core.InMemoryStore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ._protocols import Fetch

if TYPE_CHECKING:
    from ._store import InMemoryStore

__all__ = ["InMemoryBufferView"]


class InMemoryBufferView:
    """What an estimator's loader reads from an in-memory store; safe from any thread.

    Args:
        store: the store to read.
    """

    def __init__(self, store: InMemoryStore) -> None:
        self.store = store

    def fetch(self, statuses: Sequence[int], keys: Sequence[str], *, max_samples: int = 0,
              held_ids: np.ndarray | None = None) -> Fetch:
        """Checkout, copy the new rows of every key, release.

        Returns:
            :class:`~kestrel_core.Fetch` whose ``arrays[key]`` has shape ``(K, *D)``, rows in
            ``new_ids`` order; fresh, writable copies that share no memory with the store.
            Before the first append, ``(0,)`` float64 arrays.

        Raises:
            StoreError: as :meth:`InMemoryStore.checkout`.
        """
        keys = list(keys)
        checkout = self.store.checkout(statuses, keys, max_samples=max_samples, held_ids=held_ids)
        try:
            schema = self.store.schema
            arrays = {}
            for key in keys:
                parts = [(read.block[key], read.rows) for read in checkout.reads]
                if parts:
                    arrays[key] = _gather(parts, len(checkout.new_ids))
                elif key in schema:
                    shape, dtype = schema[key]
                    arrays[key] = np.empty((0, *shape), dtype=dtype)
                else:
                    arrays[key] = np.empty((0,), dtype=np.float64)
        finally:
            self.store.release(checkout.token)
        return Fetch(active_ids=checkout.active_ids, new_ids=checkout.new_ids, arrays=arrays)

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED (applied at once)."""
        self.store.discard(ids)

    def stats(self) -> dict[str, int]:
        """The store's counts (see :meth:`InMemoryStore.stats`)."""
        return self.store.stats()


def _gather(parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> np.ndarray:
    """Rows ``rows`` of each block, in order, copied once into a new array ``(K, *D)``.

    ``np.take(..., mode="clip")`` after a bounds check: with the default ``mode="raise"`` numpy
    buffers ``out`` and copies every row twice.
    """
    first = parts[0][0]
    out = np.empty((k, *first.shape[1:]), np.result_type(*(block.dtype for block, _ in parts)))
    pos = 0
    for block, rows in parts:
        if len(rows) and (rows.min() < 0 or rows.max() >= block.shape[0]):
            raise IndexError(f"rows {rows.min()}..{rows.max()} outside a block of {block.shape[0]} rows")
        if block.dtype == out.dtype:
            np.take(block, rows, axis=0, out=out[pos:pos + len(rows)], mode="clip")
        else:
            out[pos:pos + len(rows)] = block[rows]
        pos += len(rows)
    return out
