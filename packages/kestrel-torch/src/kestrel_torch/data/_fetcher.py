"""The background half of :class:`~kestrel_torch.CachedDataLoader`.

Everything here runs on the loader's thread ``kestrel-loader-<name>``: the store fetch, the
transforms, shape and dtype checks, the host → device copy, growing or upcasting the cache and
writing every new row — into rows that were already free when the fetch started, and past the
end of the used rows. The training thread never reads those rows, so nothing it does races
with these writes. The training thread (``_loader``) hands a :class:`CacheState` of the cache to
:class:`Fetcher` and later applies the :class:`Prepared` result — bookkeeping only: rows this
fetch evicts become free rows for the next one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any

import numpy as np
import torch

from kestrel_core import BufferView, split_key
from kestrel_torch._errors import StoreError
from kestrel_torch.data._staging import HostToDevice, torch_dtype

__all__ = ["Fetcher", "Prepared", "CacheState", "Worker"]

Transform = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class CacheState:
    """The cache as a fetch starts; nothing writes to it until that fetch is applied."""

    row_to_id: np.ndarray  # int64 (used,): copy of the occupied rows' ids, -1 for a hole
    capacity: int  # C
    cache: dict[str, torch.Tensor]  # key -> (C, *D); read only by the background thread
    ready: Any  # CUDA event after the training thread's last write to the cache, or None
    retired: list[torch.Tensor]  # replaced caches, dropped by the background thread (freeing costs)


@dataclass
class Prepared:
    """What one background fetch hands to the training thread."""

    active_ids: np.ndarray  # int64 (A,)
    new_ids: np.ndarray  # int64 (K,)
    stale: np.ndarray  # bool (used,): occupied rows whose id left the status set
    fill: np.ndarray  # int64: rows free when the fetch started, receiving the first new ids
    end: int  # the rows [used, end) receive the rest
    # key -> (K, *D) on the device: only for the first fill (later fetches write into the cache)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # grown or upcast caches, rows [0, used) copied
    caches: dict[str, torch.Tensor] = field(default_factory=dict)
    changes: list[tuple[str, torch.dtype, torch.dtype, torch.dtype]] = field(default_factory=list)


class Worker:
    """One named daemon thread running submitted jobs in order (torch's pin-memory pattern)."""

    def __init__(self, name: str) -> None:
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self.thread = threading.Thread(target=_work, args=(self._queue,), name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._queue.put((fn, future))
        return future

    def stop(self, timeout: float | None = 10.0) -> None:
        self._queue.put(None)
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)


def _work(queue: SimpleQueue) -> None:
    while (item := queue.get()) is not None:
        fn, future = item
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the training thread, re-raised by sync()
                future.set_exception(exc)
        del item, fn, future


class Fetcher:
    """Fetch new rows for a cache and prepare them on the device (background thread only).

    Args: as :class:`~kestrel_torch.CachedDataLoader`, already validated; ``statuses`` as ints.
    """

    def __init__(
        self,
        view: BufferView,
        keys: tuple[str, ...],
        statuses: tuple[int, ...],
        device: torch.device,
        transforms: Mapping[str, Transform],
        dtypes: Mapping[str, torch.dtype],
        max_samples: int,
        name: str,
    ) -> None:
        self.view, self.keys, self.statuses = view, keys, statuses
        self.transforms, self.dtypes = dict(transforms), dict(dtypes)
        self.max_samples, self.name = max_samples, name
        self.transfer = HostToDevice(device)

    def __call__(self, start: CacheState) -> Prepared:
        """Run one fetch for the cache described by ``start``.

        Raises:
            StoreError: a key is missing, changed its per-sample shape or has no torch dtype.
            Exception: whatever ``view.fetch`` or a transform raised.
        """
        start.retired.clear()
        held = start.row_to_id[start.row_to_id >= 0]
        fetched = self.view.fetch(
            self.statuses, self.keys, max_samples=self.max_samples, held_ids=held
        )
        active = np.asarray(fetched.active_ids, dtype=np.int64).reshape(-1)
        new_ids = np.asarray(fetched.new_ids, dtype=np.int64).reshape(-1)
        k = new_ids.size
        stale = (start.row_to_id >= 0) & ~np.isin(start.row_to_id, active)
        # Only rows that were free before this fetch: the training thread may still be reading
        # the stale ones until this fetch is applied, so they are reused by the next fetch.
        holes = np.flatnonzero(start.row_to_id < 0)
        fill = holes[: min(k, holes.size)]
        end = start.row_to_id.size + k - fill.size
        prepared = Prepared(active, new_ids, stale, fill, end)
        if k == 0:
            return prepared
        for key in self.keys:
            if key not in fetched.arrays:
                raise StoreError(
                    f"loader {self.name!r}: fetch returned no key {key!r} "
                    f"(returned keys: {sorted(fetched.arrays)})"
                )
            array = self._prepare_array(key, np.asarray(fetched.arrays[key]), k)
            shape = tuple(array.shape[1:])
            cache = start.cache.get(key)
            if cache is not None and shape != tuple(cache.shape[1:]):
                raise StoreError(
                    f"loader {self.name!r}: key {key!r} arrived with per-sample shape {shape}, "
                    f"the cache holds {tuple(cache.shape[1:])}"
                )
            try:
                incoming = torch_dtype(array.dtype)
            except TypeError as err:
                raise StoreError(
                    f"loader {self.name!r}: key {key!r} has dtype {array.dtype}, "
                    "which has no torch equivalent"
                ) from err
            target = self.dtypes.get(key) or incoming
            if key not in self.dtypes and cache is not None and incoming != cache.dtype:
                target = torch.promote_types(cache.dtype, incoming)
                prepared.changes.append((key, cache.dtype, incoming, target))
            prepared.tensors[key] = self.transfer.copy(array, target)
        if start.cache:
            self._grow_and_append(start, prepared)
        self.transfer.wait()
        return prepared

    def _grow_and_append(self, start: CacheState, prepared: Prepared) -> None:
        """Grow or upcast the caches and write every new row — work the training thread skips.

        The rows written are ``fill`` (free when the fetch started) and ``[used, end)``: none
        holds a live sample, so the training thread never reads them while this fetch runs.
        Growth and upcasts copy rows ``[0, used)`` (only read) into new tensors the training
        thread swaps in.
        """
        used, n_fill = start.row_to_id.size, prepared.fill.size
        self.transfer.after(start.ready)
        capacity = (
            max(prepared.end, 2 * start.capacity)
            if prepared.end > start.capacity
            else start.capacity
        )
        fill_dev = torch.from_numpy(prepared.fill).to(self.transfer.device) if n_fill else None
        for key, cache in start.cache.items():
            tensor = prepared.tensors.pop(key)
            if capacity != start.capacity or cache.dtype != tensor.dtype:
                cache = prepared.caches[key] = self.transfer.regrow(
                    cache, used, capacity, tensor.dtype
                )
            if fill_dev is not None:
                self.transfer.scatter(cache, fill_dev, tensor[:n_fill])
            if prepared.end > used:
                self.transfer.write(cache, used, tensor[n_fill:])

    def _prepare_array(self, key: str, array: np.ndarray, k: int) -> np.ndarray:
        """Transform, check and normalise one fetched array ``(K, *D)``."""
        if array.shape[:1] != (k,):
            raise StoreError(
                f"loader {self.name!r}: key {key!r} arrived with shape {array.shape}, "
                f"expected leading dimension {k} (one row per new id)"
            )
        if key in self.transforms:
            before = array.shape
            array = np.asarray(self.transforms[key](array))
            if array.shape[:1] != (k,):
                raise StoreError(
                    f"loader {self.name!r}: transform of key {key!r} returned shape "
                    f"{array.shape} from {before}, expected leading dimension {k}"
                )
        if split_key(key)[1] == "log_prob" and array.ndim != 1:
            if array.size != k:
                raise StoreError(
                    f"loader {self.name!r}: key {key!r} has per-sample shape {array.shape[1:]}, "
                    "expected () or (1,)"
                )
            array = array.reshape(k)
        return array
