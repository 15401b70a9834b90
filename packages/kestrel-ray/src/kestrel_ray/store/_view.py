"""``RayBufferView``: the loader's window on the Ray store (refs → arrays, batched).

The one place the training side turns block refs into arrays: ``fetch`` checks out the ids the
caller lacks, resolves the blocks it needs with one batched wait (one per
:func:`~kestrel_ray.store._read_budget.read_budget` bytes of blocks when they are more), gathers the rows per key in
``new_ids`` order into fresh arrays (kestrel-core's :func:`~kestrel_core.store.read_checkout`,
as the in-memory view does), and always releases the checkout. It is safe to call from any
thread (the torch loader calls it from its background thread).

Inside an async actor (the NodeWrapper that trains an estimator) a blocking ``ray.get`` is what
Ray warns about even off the event loop, so there the view waits on ``ObjectRef.future()``
instead (``use_futures=True``): the values are resolved by Ray's own threads and the actor's
event loop is never asked to do it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray.actor import ActorHandle

from kestrel_core import Fetch
from kestrel_core.store import Schema, empty_spec, read_checkout, resolve_on_disk
from kestrel_ray.store._handle import StoreHandle
from kestrel_ray.store._read_budget import read_budget

__all__ = ["RayBufferView"]


class RayBufferView:
    """:class:`kestrel_core.BufferView` over a :class:`~kestrel_ray.SampleStore` actor.

    Shape symbols: K new ids of a fetch, D_key a key's per-sample shape.

    Args:
        store: the store's :class:`~kestrel_ray.StoreHandle` (or its actor handle).
        use_futures: wait through ``ObjectRef.future()`` rather than ``ray.get`` (set inside
            async actors).
        timeout: seconds to wait for the store or a block before :class:`StoreError`
            (``None`` = no limit).
    """

    def __init__(
        self,
        store: StoreHandle | ActorHandle,
        *,
        use_futures: bool = False,
        timeout: float | None = None,
    ):
        actor = store.actor if isinstance(store, StoreHandle) else store
        self._store = StoreHandle(actor, timeout=timeout, use_futures=use_futures)
        self._schema: Schema | None = None
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._store,))

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
        """Check out, read and release in one blocking call.

        Args:
            statuses: statuses to read (e.g. ``TRAINABLE``).
            keys: flat keys to read.
            max_samples: if > 0, read a random subset of at most this many active ids.
            held_ids: int64 ids the caller already holds.

        Returns:
            :class:`kestrel_core.Fetch` whose ``arrays[key]`` is a new, writable array
            ``(K, *D_key)`` (rows in ``new_ids`` order) that shares no memory with the store.

        Raises:
            StoreError: an unknown key or status, a lost block, or a timeout.
        """
        keys = [str(k) for k in keys]
        co = self._store.checkout(statuses, keys, max_samples=max_samples, held_ids=held_ids)
        try:
            # a read larger than a share of the object store is resolved in groups
            schema, budget = (self._schema_of(keys), read_budget()) if co.reads else (None, None)
            arrays = read_checkout(
                co, keys, self._resolve, self._empty_spec, schema=schema, max_bytes=budget
            )
        finally:
            self._store.release_nowait(co.token)  # ordered after the checkout by Ray
        return Fetch(active_ids=co.active_ids, new_ids=co.new_ids, arrays=arrays)

    def _resolve(self, values: list[Any]) -> list[Any]:
        """The arrays of block values: refs (each distinct ref waited for once, one batched
        wait) and the :class:`~kestrel_core.store.OnDisk` rows of a buffer that trains from
        disk (mapped from the journal, ``buffer.storage``)."""
        return resolve_on_disk(values, self._wait)

    def _wait(self, refs: list[Any]) -> list[Any]:
        unique: dict[Any, int] = {}
        for ref in refs:
            unique.setdefault(ref, len(unique))
        values = self._store.wait(list(unique))
        return [values[unique[ref]] for ref in refs]

    def _schema_of(self, keys: Sequence[str]) -> Schema:
        """The store's schema, asked again only while it lacks one of ``keys``."""
        with self._lock:
            if self._schema is None or any(key not in self._schema for key in keys):
                self._schema = self._store.schema() or {}
            return self._schema

    def _empty_spec(self, key: str) -> tuple[tuple[int, ...], Any]:
        return empty_spec(self._schema_of([key]), key)

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED; returns before the store applied it."""
        self._store.discard_nowait(np.asarray(ids, dtype=np.int64))

    def stats(self) -> dict[str, int]:
        """The store's counts (blocking; never call it on an event loop).

        Raises:
            StoreError: the store did not answer within the timeout.
        """
        return self._store.stats()


def _rebuild(store: StoreHandle) -> RayBufferView:
    return RayBufferView(store, use_futures=store.use_futures, timeout=store.timeout)
