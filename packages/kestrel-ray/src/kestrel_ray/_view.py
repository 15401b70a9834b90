"""``RayBufferView``: the loader's window on the Ray store (refs → arrays, batched).

The one place the training side turns block refs into arrays: ``fetch`` checks out the ids the
caller lacks, resolves every block it needs with one batched get, gathers the rows per key in
``new_ids`` order into fresh arrays, and always releases the checkout. It is safe to call from
any thread (the torch loader calls it from its background thread).

Inside an async actor (the NodeWrapper that trains an estimator) a blocking ``ray.get`` is what
Ray warns about even off the event loop, so there the view waits on
``ObjectRef.future()`` instead (``use_futures=True``): the values are resolved by Ray's own
threads and the actor's event loop is never asked to do it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
from kestrel_core import Fetch, StoreError

__all__ = ["RayBufferView"]


class RayBufferView:
    """:class:`kestrel_core.BufferView` over a :class:`~kestrel_ray.SampleStore` actor.

    Shape symbols: K new ids of a fetch, D_key a key's per-sample shape.

    Args:
        store: the store's actor handle.
        use_futures: wait through ``ObjectRef.future()`` rather than ``ray.get`` (set inside
            async actors).
        timeout: seconds to wait for the store or a block before :class:`StoreError`
            (``None`` = no limit).
    """

    def __init__(self, store: Any, *, use_futures: bool = False, timeout: float | None = None):
        self._store = store
        self._use_futures = use_futures
        self._timeout = timeout
        self._schema: dict | None = None
        self._lock = threading.Lock()

    def __reduce__(self):
        return (_rebuild, (self._store, self._use_futures, self._timeout))

    def _get(self, refs: Any) -> Any:
        single = not isinstance(refs, list)
        refs = [refs] if single else refs
        try:
            if self._use_futures:
                futures = [r.future() for r in refs]
                values = [f.result(timeout=self._timeout) for f in futures]
            else:
                values = ray.get(refs, timeout=self._timeout)
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, StoreError):
                raise StoreError(str(cause)) from err
            raise
        except (ray.exceptions.GetTimeoutError, TimeoutError) as err:
            raise StoreError(f"the sample store did not answer within {self._timeout} s") from err
        except ray.exceptions.ObjectLostError as err:
            raise StoreError(f"a stored block is lost: {err}") from err
        return values[0] if single else values

    def fetch(self, statuses: Sequence[int], keys: Sequence[str], *, max_samples: int = 0,
              held_ids: np.ndarray | None = None) -> Fetch:
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
        held = None if held_ids is None else np.asarray(held_ids, dtype=np.int64)
        co = self._get(self._store.checkout.remote(
            [int(s) for s in statuses], keys, int(max_samples), held))
        try:
            unique_refs: dict[Any, int] = {}
            for read in co.reads:
                for key in keys:
                    unique_refs.setdefault(read.block[key], len(unique_refs))
            values = self._get(list(unique_refs)) if unique_refs else []
            arrays = {}
            for key in keys:
                parts = [(np.asarray(values[unique_refs[read.block[key]]]), read.rows)
                         for read in co.reads]
                arrays[key] = self._gather(key, parts, len(co.new_ids))
        finally:
            self._store.release.remote(co.token)  # ordered after the checkout by Ray
        return Fetch(active_ids=co.active_ids, new_ids=co.new_ids, arrays=arrays)

    def _gather(self, key: str, parts: list[tuple[np.ndarray, np.ndarray]], k: int) -> np.ndarray:
        if not parts:
            shape, dtype = self._empty_meta(key)
            return np.empty((0, *shape), dtype)
        shapes = {a.shape[1:] for a, _ in parts}
        if len(shapes) != 1:
            raise StoreError(f"key {key!r}: stored blocks have per-sample shapes {sorted(shapes)}")
        out = np.empty((k, *parts[0][0].shape[1:]), np.result_type(*(a.dtype for a, _ in parts)))
        pos = 0
        for arr, rows in parts:
            if arr.dtype == out.dtype:
                if len(rows) and (rows.min() < 0 or rows.max() >= arr.shape[0]):
                    raise StoreError(f"key {key!r}: rows {rows.min()}..{rows.max()} outside a stored block "
                                     f"of {arr.shape[0]} rows")
                # mode="clip" (bounds checked above): with the default "raise" numpy buffers `out`
                # and copies every row twice, four times slower for a block of 128 × 1000 float64
                np.take(arr, rows, axis=0, out=out[pos:pos + len(rows)], mode="clip")
            else:
                out[pos:pos + len(rows)] = arr[rows]
            pos += len(rows)
        return out

    def _empty_meta(self, key: str) -> tuple[tuple[int, ...], str]:
        with self._lock:
            if self._schema is None or key not in self._schema:
                self._schema = self._get(self._store.schema.remote()) or {}
        return self._schema.get(key, ((), "float64"))

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED; returns before the store applied it."""
        self._store.discard.remote(np.asarray(ids, dtype=np.int64))

    def stats(self) -> dict[str, int]:
        """The store's counts (blocking; never call it on an event loop).

        Raises:
            StoreError: the store did not answer within the timeout.
        """
        return self._get(self._store.stats.remote())


def _rebuild(store: Any, use_futures: bool, timeout: float | None) -> RayBufferView:
    return RayBufferView(store, use_futures=use_futures, timeout=timeout)
