"""The cached device loader: contiguous tensors per flat key, refreshed in the background.

The design (see the package README): a background thread (``_fetcher``) does every slow step —
checkout, fetch, transforms, stacking, dtype conversion, host → device copy, growing the cache
and writing every new row into rows no live sample occupies (rows freed by an earlier fetch,
and rows past the used end). The training thread only does bookkeeping on small int64
arrays: it marks evicted rows free — the next fetch refills them — and makes the new rows
live. ``sync()`` never waits for the background thread after the first fill, and never copies
sample data. The price: the cache may hold up to one fetch's worth of free rows.

That is the live design (``prefetch=True``): which rows a sync brings in depends on how far
the background fetch got, i.e. on the machine's speed and load. With ``prefetch=False`` no
fetch runs between syncs: each ``sync()`` fetches and waits, so the cache holds the store
exactly as it was at the call, and training that syncs at fixed points sees the same rows
whatever the timing (an estimator's direct ``train(view)`` call; see ``StepwiseEstimator``).
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future

import numpy as np
import torch

from kestrel_core import TRAINABLE, BufferView, Status, split_key
from kestrel_torch._errors import ConfigError, EstimatorError
from kestrel_torch.data._batch import Batch
from kestrel_torch.data._fetcher import CacheState, Fetcher, Prepared, Transform, Worker

__all__ = ["CachedDataLoader"]


class CachedDataLoader:
    """Training samples of one store view, cached as contiguous tensors on a device.

    Shape symbols: C the cache capacity (rows), K the rows of one fetch, B a batch size, D a
    key's per-sample shape.

    Args:
        view: the store view to read from (thread-safe :class:`~kestrel_core.BufferView`).
        keys: flat keys to cache, e.g. ``["theta.value", "theta.log_prob", "x.value"]``.
        statuses: sample statuses to cache (default TRAINING and DISFAVOURED).
        device: the cache's device.
        transforms: optional ``{key: f}``; ``f`` maps the fetched float64 numpy array
            ``(K, *D)`` to a new array ``(K, *D')`` in the background thread (e.g. θ into the
            prior's standard-normal space).
        dtypes: optional ``{key: torch.dtype}`` forcing a key's cache dtype.
        max_samples: cache at most this many samples (a random subset, chosen by the store);
            0 means all.
        name: names the background thread ``kestrel-loader-<name>`` and error messages.
        prefetch: start the next fetch as soon as one is applied, so that :meth:`sync` applies
            whatever the background thread has ready without waiting (the live design; which
            sync brings which rows then depends on timing). ``False``: no fetch runs between
            syncs; every :meth:`sync` fetches and waits, and the cache holds the store as it was
            at the call (deterministic training; costs one blocking fetch per sync).

    Raises:
        ConfigError: empty or duplicate ``keys``, or ``transforms``/``dtypes`` naming a key
            not in ``keys``, or ``max_samples < 0``.

    Dtypes: each key has one dtype, fixed by its first fill or by ``dtypes``. A later
    fetch in another dtype is converted to the wider of the two: a wider arrival (float64 into
    a float32 cache) upcasts the key's cache, a narrower one is cast up on arrival. So float64
    data is never silently downcast. Each key's change is reported once with a warning.
    ``*.log_prob`` keys are kept as ``(C,)``: a per-sample shape ``(1,)`` is flattened.

    Example:
        >>> with CachedDataLoader(view, ["theta.value", "x.value"]) as loader:  # doctest: +SKIP
        ...     loader.sync()                     # first call blocks until data exists
        ...     batch = loader.sample_batch(128)  # on the device, no host sync
    """

    def __init__(
        self,
        view: BufferView,
        keys: Sequence[str],
        statuses: Sequence[int] | int = TRAINABLE,
        device: torch.device | str = "cpu",
        *,
        transforms: Mapping[str, Transform] | None = None,
        dtypes: Mapping[str, torch.dtype] | None = None,
        max_samples: int = 0,
        name: str = "loader",
        prefetch: bool = True,
    ) -> None:
        self._keys = tuple(keys)
        if not self._keys or len(set(self._keys)) != len(self._keys):
            raise ConfigError(
                f"CachedDataLoader(keys={list(self._keys)!r}): expected distinct flat keys, at least one"
            )
        for key in self._keys:
            split_key(key)
        for arg, given in (("transforms", transforms), ("dtypes", dtypes)):
            unknown = sorted(set(given or ()) - set(self._keys))
            if unknown:
                raise ConfigError(
                    f"CachedDataLoader({arg}=...): keys {unknown} are not among keys {list(self._keys)}"
                )
        if int(max_samples) < 0:
            raise ConfigError(f"CachedDataLoader(max_samples={max_samples}): expected >= 0")
        self._view = view
        self._statuses = (
            (int(statuses),) if isinstance(statuses, int) else tuple(int(s) for s in statuses)
        )
        self._device = torch.device(device)
        self._name = name
        self._prefetch = bool(prefetch)
        self._fetcher = Fetcher(
            view,
            self._keys,
            self._statuses,
            self._device,
            transforms or {},
            dtypes or {},
            int(max_samples),
            name,
        )

        self._cache: dict[str, torch.Tensor] = {}  # key -> (C, *D) on the device
        self._row_to_id = np.empty(0, dtype=np.int64)  # (C,), -1 for a free row
        self._used = 0  # rows [0, used) hold live ids or holes; [used, C) are unused
        self._live_rows = np.empty(0, dtype=np.int64)  # rows holding live ids, in id order
        self._in_order = True  # live rows are exactly 0..used-1 in id order
        self._rows_dev = torch.empty(0, dtype=torch.int64, device=self._device)
        self._ids_dev = torch.empty(0, dtype=torch.int64, device=self._device)
        self._reported: set[str] = set()
        self._retired: list[torch.Tensor] = []
        self._filled = False
        self._closed = False
        self._future: Future | None = None
        self._worker = Worker(f"kestrel-loader-{name}")
        self._finalizer = weakref.finalize(self, self._worker.stop, 0)

    # -- public state ------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Number of live samples in the cache."""
        return int(self._live_rows.size)

    @property
    def ids(self) -> np.ndarray:
        """Live sample ids, ascending, int64 numpy array ``(count,)`` (a copy); batch position
        ``i`` of :meth:`sample_batch` and row ``i`` of :meth:`all` hold sample ``ids[i]``."""
        return self._row_to_id[self._live_rows]

    @property
    def device(self) -> torch.device:
        """The cache's device."""
        return self._device

    @property
    def keys(self) -> tuple[str, ...]:
        """The cached flat keys."""
        return self._keys

    @property
    def prefetch(self) -> bool:
        """True: a fetch runs in the background between syncs (see the class)."""
        return self._prefetch

    @property
    def thread(self) -> threading.Thread:
        """The background thread (``kestrel-loader-<name>``)."""
        return self._worker.thread

    # -- sync --------------------------------------------------------------------------------
    def sync(self, wait: bool = False) -> bool:
        """Apply the finished background fetch, if any, and start the next one.

        The first call blocks until the first fetch is applied; later calls return at once
        when the fetch is still running. Without ``prefetch`` every call fetches now and waits
        (``wait`` is implied): the cache then holds the store as it was at the call.

        Args:
            wait: block until the running fetch is done and apply it (tests, end of training).
                The fetch may have started before the latest appends: two ``sync(wait=True)``
                calls in a row make the cache reflect the store as it was at the first call.

        Returns:
            True when a fetch was applied (new data or evictions, if the store had any), False
            when the fetch is in flight.

        Raises:
            EstimatorError: the first fill found no samples in ``statuses`` (the message counts
                the buffer's samples per status).
            StoreError: a fetched key is missing or changed its per-sample shape.
            Exception: whatever the background fetch raised, re-raised here.
        """
        if self._closed:
            raise EstimatorError(f"loader {self._name!r} is closed")
        if self._future is None:
            self._future = self._launch()
        if self._filled and not wait and self._prefetch and not self._future.done():
            return False
        future, self._future = self._future, None
        try:
            prepared = future.result()
        except BaseException as exc:
            if hasattr(exc, "add_note"):
                exc.add_note(f"(raised in the background thread of loader {self._name!r})")
            raise
        self._apply(prepared)
        if not self._filled:
            if self.count == 0:
                raise self._empty_error()
            self._filled = True
        if self._prefetch:
            self._future = self._launch()
        return True

    def _launch(self) -> Future:
        ready = None
        # the transfer stream reads the cache after our writes
        if self._device.type == "cuda" and self._cache:
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self._device))
        start = CacheState(
            self._row_to_id[: self._used].copy(),
            self._row_to_id.size,
            dict(self._cache),
            ready,
            self._retired,
        )
        self._retired = []
        return self._worker.submit(functools.partial(self._fetcher, start))

    # -- training thread ---------------------------------------------------------------------
    def _apply(self, prepared: Prepared) -> None:
        used = self._used
        self._row_to_id[:used][prepared.stale] = -1
        for key, old, new, target in prepared.changes:
            if key not in self._reported:
                self._reported.add(key)
                warnings.warn(
                    f"loader {self._name!r}: key {key!r} arrived as {new} while the cache held {old}; "
                    f"the cache keeps {target} for this key (reported once per key)",
                    stacklevel=3,
                )
        k = prepared.new_ids.size
        if k:
            fill, end, n_fill = prepared.fill, prepared.end, prepared.fill.size
            if self._device.type == "cuda":  # written on the transfer stream, consumed on ours
                stream = torch.cuda.current_stream(self._device)
                for tensor in (*prepared.tensors.values(), *prepared.caches.values()):
                    if tensor.numel():
                        tensor.record_stream(stream)
            if not self._cache:  # first fill: adopt the fetched tensors (owned, never the store's)
                self._cache = dict(prepared.tensors)
                self._row_to_id = prepared.new_ids.copy()
            else:
                self._retired.extend(self._cache[key] for key in prepared.caches)
                self._cache.update(prepared.caches)
                capacity = next(iter(self._cache.values())).shape[0]
                if capacity > self._row_to_id.size:
                    row_to_id = np.full(capacity, -1, dtype=np.int64)
                    row_to_id[:used] = self._row_to_id[:used]
                    self._row_to_id = row_to_id
                self._row_to_id[fill] = prepared.new_ids[:n_fill]
                self._row_to_id[used:end] = prepared.new_ids[n_fill:]
            used = end
        row_to_id = self._row_to_id
        live = np.flatnonzero(row_to_id[:used] >= 0)
        self._used = int(live[-1]) + 1 if live.size else 0
        row_to_id[self._used : used] = -1
        ids = row_to_id[live]
        # live rows in id order: a batch position maps to the same sample whichever rows the
        # fetches happened to fill (deterministic training does not depend on fetch timing)
        self._in_order = live.size == self._used
        if ids.size > 1 and bool(np.any(ids[1:] < ids[:-1])):
            live = live[np.argsort(ids, kind="stable")]
            self._in_order = False
        self._live_rows = live
        self._rows_dev = torch.from_numpy(live).to(self._device)
        self._ids_dev = torch.from_numpy(row_to_id[live]).to(self._device)

    def _empty_error(self) -> EstimatorError:
        names = "/".join(Status(s).name for s in self._statuses)
        try:
            stats = self._view.stats()
            train = int(stats.get("training", 0)) + int(stats.get("disfavoured", 0))
            buffer = f"buffer: {train} train, {int(stats.get('validation', 0))} validation"
        except Exception as err:  # the message must not hide the real problem
            buffer = f"buffer counts unavailable: {err!r}"
        return EstimatorError(
            f"no samples with status {names} ({buffer}); loader {self._name!r} has nothing to draw from"
        )

    # -- batches -----------------------------------------------------------------------------
    def sample_batch(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """Draw ``batch_size`` cached samples uniformly with replacement, on the device.

        Args:
            batch_size: B ≥ 1.
            generator: torch generator on the cache's device, for reproducible draws.

        Returns:
            A :class:`Batch` of copies ``(B, *D)`` on :attr:`device`; its ids stay on the device
            until read, so this never waits for the device.

        Raises:
            EstimatorError: the cache is empty (message counts the buffer's samples).
            ValueError: ``batch_size < 1``.
        """
        if batch_size < 1:
            raise ValueError(f"sample_batch(batch_size={batch_size}): expected >= 1")
        count = self._live_rows.size
        if count == 0:
            raise self._empty_error()
        pos = torch.randint(count, (batch_size,), device=self._device, generator=generator)
        rows = pos if self._in_order else self._rows_dev[pos]
        # index_select: the same gather as cache[rows], at about half its cost on the CPU
        data = {key: cache.index_select(0, rows) for key, cache in self._cache.items()}
        return Batch(self._ids_dev[pos], data, self._view)

    def all(self) -> Batch:
        """Every live sample in id order (e.g. the validation set), as copies on the device.

        Raises:
            EstimatorError: the cache is empty.
        """
        if self._live_rows.size == 0:
            raise self._empty_error()
        if self._in_order:
            data = {key: cache[: self._used].clone() for key, cache in self._cache.items()}
        else:
            data = {
                key: cache.index_select(0, self._rows_dev) for key, cache in self._cache.items()
            }
        return Batch(self.ids, data, self._view)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the background thread (waits for a running fetch up to 10 s); idempotent."""
        if self._closed:
            return
        self._closed = True
        self._future = None
        self._finalizer.detach()
        self._worker.stop()

    def __enter__(self) -> CachedDataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"CachedDataLoader(name={self._name!r}, count={self.count}, capacity={self._row_to_id.size}, "
            f"device={str(self._device)!r}, keys={list(self._keys)}, prefetch={self._prefetch})"
        )
