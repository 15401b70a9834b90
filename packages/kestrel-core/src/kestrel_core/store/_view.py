"""The :class:`~kestrel_core.BufferView` of an in-process store (the in-memory store's ``view()``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from kestrel_core.store._disk import resolve_on_disk
from kestrel_core.store._gather import empty_spec, read_checkout
from kestrel_core.store._protocol import Fetch, SampleStore

__all__ = ["InMemoryBufferView"]


class _SchemaStore(SampleStore, Protocol):
    """A store in this process that also tells its key schema."""

    @property
    def schema(self) -> Mapping[str, tuple[tuple[int, ...], Any]]: ...


class InMemoryBufferView:
    """What an estimator's loader reads from an in-memory store; safe from any thread.

    Args:
        store: the store to read (an :class:`~kestrel_core.InMemoryStore`, or any
            :class:`~kestrel_core.SampleStore` in this process whose blocks hold arrays and
            that has a ``schema`` property).
    """

    def __init__(self, store: _SchemaStore) -> None:
        self.store = store

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
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
            arrays = read_checkout(
                checkout,
                keys,
                lambda values: resolve_on_disk(values, list),  # blocks on disk: the journal
                lambda key: empty_spec(self.store.schema, key),
            )
        finally:
            self.store.release(checkout.token)
        return Fetch(active_ids=checkout.active_ids, new_ids=checkout.new_ids, arrays=arrays)

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED (applied at once)."""
        self.store.discard(ids)

    def stats(self) -> dict[str, int]:
        """The store's counts (see :meth:`InMemoryStore.stats`)."""
        return self.store.stats()
