"""The sample-store contract on numpy blocks in one process.

:class:`InMemoryStore` implements :class:`~kestrel_core.SampleStore` exactly as the Ray store
actor of kestrel-ray does, with numpy arrays where that one holds ObjectRefs: tests, GPU
benchmarks and small jobs use it, and both run the same contract test suite
(``tests/core/store_contract.py``). Shape symbols: n rows in a block, M sample ids so far,
D a key's per-sample shape.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._boundary import check_count
from ._errors import ConfigError, StoreError
from ._lifecycle import LIVE, Status, rotate
from ._protocols import BlockRead, Checkout
from ._store_schema import Schema, buffer_int, validate_block, write_snapshots
from ._store_view import InMemoryBufferView

__all__ = ["InMemoryStore", "StoreWarning"]

_DEAD = Status.TOMBSTONE  # statuses >= this are dead


class StoreWarning(UserWarning):
    """A store operation works but wastes data (e.g. an append larger than the buffer)."""


@dataclass
class _Block:
    arrays: dict[str, np.ndarray]  # read-only copies, (n, *D) each
    start: int  # first sample id; the block holds ids start .. start + n - 1
    n: int
    pins: int = 0


class InMemoryStore:
    """Training buffer of numpy blocks; thread-safe (one lock).

    Each appended block is stored as read-only copies and each of its rows becomes a sample
    with a new id (never reused) and status VALIDATION; :func:`~kestrel_core.rotate` runs after
    every append. A block is dropped — its data freed and its rows marked DELETED — once all
    its rows are TOMBSTONE/DELETED and no checkout pins it. The first non-empty append fixes
    the key schema (keys, per-sample shapes, dtype kinds); later appends must match it.

    Args:
        min_samples, max_samples, validation_samples: the ``buffer`` config values.
        snapshot_every: save every k-th appended sample (global counter, 1-based) as
            ``snapshot_dir/<sample id:06d>.npz`` holding its per-sample arrays by flat key;
            0 disables.
        snapshot_dir: directory for snapshots (required when ``snapshot_every > 0``).
        seed: seed of the generator that draws ``checkout(max_samples=…)`` subsets.

    Raises:
        ConfigError: a count is not a non-negative integer, ``max_samples < 1``, or snapshots
            are asked for without a directory.
    """

    def __init__(self, *, min_samples: int, max_samples: int, validation_samples: int,
                 snapshot_every: int = 0, snapshot_dir: str | Path | None = None,
                 seed: int | None = None) -> None:
        self.min_samples = buffer_int(min_samples, "min_samples", 0)
        self.max_samples = buffer_int(max_samples, "max_samples", 1)
        self.validation_samples = buffer_int(validation_samples, "validation_samples", 0)
        self.snapshot_every = buffer_int(snapshot_every, "snapshot_every", 0)
        if self.snapshot_every and snapshot_dir is None:
            raise ConfigError(f"buffer.snapshot_every={self.snapshot_every} needs a snapshot directory")
        self.snapshot_dir = Path(snapshot_dir) if snapshot_dir is not None else None
        self._lock = threading.RLock()
        self._rng = np.random.default_rng(seed)
        self._status = np.empty(0, dtype=np.int8)
        self._block_of = np.empty(0, dtype=np.int64)
        self._row_of = np.empty(0, dtype=np.int64)
        self._n_ids = 0
        self._live_start = 0  # every id below it is TOMBSTONE or DELETED
        self._blocks: dict[int, _Block] = {}
        self._next_block = 0
        self._checkouts: dict[int, list[int]] = {}
        self._next_token = 0
        self._schema: Schema | None = None

    @classmethod
    def from_config(cls, buffer_config: Any, snapshot_dir: str | Path | None = None, *,
                    seed: int | None = None) -> InMemoryStore:
        """Build from a ``buffer`` config (attributes or mapping keys ``min_samples``,
        ``max_samples``, ``validation_samples`` and optionally ``snapshot_every``).

        Raises:
            ConfigError: as the constructor, or a required value is missing.
        """
        def get(name: str, default: Any = None) -> Any:
            if isinstance(buffer_config, Mapping):
                return buffer_config.get(name, default)
            return getattr(buffer_config, name, default)

        values = {k: get(k) for k in ("min_samples", "max_samples", "validation_samples")}
        for k, v in values.items():
            if v is None:
                raise ConfigError(f"buffer.{k} is required")
        return cls(**values, snapshot_every=get("snapshot_every", 0) or 0,
                   snapshot_dir=snapshot_dir, seed=seed)

    @property
    def schema(self) -> Schema:
        """Flat key → (per-sample shape, dtype of the first append); empty before it."""
        with self._lock:
            return dict(self._schema or {})

    def view(self) -> InMemoryBufferView:
        """A :class:`~kestrel_core.BufferView` on this store."""
        return InMemoryBufferView(self)

    # -- append -----------------------------------------------------------------------------

    def append(self, block: Mapping[str, Any], n: int) -> np.ndarray:
        """Append ``n`` rows; return their new ids (int64 ``(n,)``).

        Args:
            block: flat key → array ``(n, *D)`` (anything ``np.asarray`` takes); copied.
            n: number of rows.

        Raises:
            StoreError: a key is malformed, missing or extra; a leading dimension is not ``n``;
                a per-sample shape or dtype kind differs from the schema; nothing is stored.
            TypeError, ValueError: ``n`` is not a non-negative integer.

        Warns:
            StoreWarning: ``n > max_samples + validation_samples``: the oldest rows of this
                very block become TOMBSTONE at once.
        """
        n = check_count(n)
        with self._lock:
            arrays = validate_block(block, n, self._schema)
            if n == 0:
                return np.empty(0, dtype=np.int64)
            if n > self.max_samples + self.validation_samples:
                warnings.warn(
                    f"{n} samples appended but max_samples is {self.max_samples} "
                    f"(validation_samples {self.validation_samples}): the oldest "
                    f"{n - self.max_samples - self.validation_samples} become TOMBSTONE at once",
                    StoreWarning, stacklevel=2)
            if self._schema is None:
                self._schema = {k: (a.shape[1:], a.dtype) for k, a in arrays.items()}
            start, b = self._n_ids, self._next_block
            self._grow(start + n)
            self._status[start:start + n] = Status.VALIDATION
            self._block_of[start:start + n] = b
            self._row_of[start:start + n] = np.arange(n)
            self._n_ids, self._next_block = start + n, b + 1
            self._blocks[b] = _Block(arrays, start, n)
            window = slice(self._live_start, self._n_ids)
            self._status[window] = rotate(self._status[window], min_samples=self.min_samples,
                                          max_samples=self.max_samples,
                                          validation_samples=self.validation_samples)
            alive = np.flatnonzero(self._status[window] < _DEAD)
            self._live_start += int(alive[0]) if alive.size else self._n_ids - self._live_start
            write_snapshots(self.snapshot_dir, self.snapshot_every, arrays, start, n)
            self._collect(list(self._blocks))
            return np.arange(start, start + n, dtype=np.int64)

    def _grow(self, size: int) -> None:
        if size <= self._status.shape[0]:
            return
        cap = max(size, 2 * self._status.shape[0], 1024)
        for name in ("_status", "_block_of", "_row_of"):
            old = getattr(self, name)
            new = np.empty(cap, dtype=old.dtype)
            new[: self._n_ids] = old[: self._n_ids]
            setattr(self, name, new)

    def _collect(self, block_ids: Sequence[int]) -> None:
        """Drop unpinned blocks whose rows are all dead; their rows become DELETED."""
        for b in block_ids:
            blk = self._blocks.get(b)
            if blk is None or blk.pins:
                continue
            rows = slice(blk.start, blk.start + blk.n)
            if blk.start + blk.n <= self._live_start or bool(np.all(self._status[rows] >= _DEAD)):
                self._status[rows] = Status.DELETED
                del self._blocks[b]

    # -- checkout / release -----------------------------------------------------------------

    def checkout(self, statuses: Sequence[int], keys: Sequence[str], *, max_samples: int = 0,
                 held_ids: np.ndarray | None = None) -> Checkout:
        """Pin and return the blocks holding the active ids the caller does not hold yet.

        Args:
            statuses: readable statuses to select (VALIDATION, TRAINING, DISFAVOURED).
            keys: flat keys to read; each ``BlockRead.block`` maps them to ``(n_block, *D)``
                read-only arrays.
            max_samples: if > 0, a uniformly random subset of at most this many active ids.
            held_ids: ids the caller already holds (left out of ``new_ids``).

        Returns:
            A :class:`~kestrel_core.Checkout`; call :meth:`release` with its token.

        Raises:
            StoreError: a status is not readable, or a key is not in the schema (the message
                lists the schema).
        """
        max_samples = check_count(max_samples, "max_samples")
        wanted = [int(s) for s in statuses]
        for s in wanted:
            if s not in LIVE:
                name = Status(s).name if s in Status._value2member_map_ else "unknown"
                raise StoreError(f"checkout: status {s} ({name}) is not readable; use one of "
                                 f"{', '.join(f'{x.name}={int(x)}' for x in LIVE)}")
        keys = list(keys)
        with self._lock:
            if self._schema is not None:
                unknown = [k for k in keys if k not in self._schema]
                if unknown:
                    raise StoreError(f"checkout: unknown key(s) {unknown}; the store holds "
                                     f"{sorted(self._schema)}")
            window = self._status[self._live_start:self._n_ids]
            active = np.flatnonzero(np.isin(window, wanted)).astype(np.int64) + self._live_start
            if 0 < max_samples < active.size:
                active = np.sort(self._rng.choice(active, max_samples, replace=False))
            new = active
            if held_ids is not None and np.size(held_ids):
                new = active[~np.isin(active, np.asarray(held_ids, dtype=np.int64))]
            blocks = self._block_of[new]
            cuts = np.flatnonzero(np.diff(blocks)) + 1
            reads, pinned = [], []
            for seg in np.split(np.arange(new.size), cuts) if new.size else []:
                b = int(blocks[seg[0]])
                blk = self._blocks[b]
                blk.pins += 1
                pinned.append(b)
                reads.append(BlockRead(block={k: blk.arrays[k] for k in keys},
                                       rows=self._row_of[new[seg]].copy(), ids=new[seg].copy()))
            token = self._next_token
            self._next_token += 1
            self._checkouts[token] = pinned
            return Checkout(token=token, active_ids=active, new_ids=new.copy(), reads=reads)

    def release(self, token: int) -> None:
        """End a checkout; its blocks become collectable.

        Raises:
            StoreError: unknown token (never issued, or already released).
        """
        with self._lock:
            pinned = self._checkouts.pop(int(token), None)
            if pinned is None:
                raise StoreError(f"release: unknown checkout token {token!r} (already released?)")
            for b in pinned:
                self._blocks[b].pins -= 1
            self._collect(pinned)

    # -- statuses ---------------------------------------------------------------------------

    def _ids(self, ids: Sequence[int] | np.ndarray, what: str) -> np.ndarray:
        arr = np.asarray(ids).reshape(-1)
        if arr.size and arr.dtype.kind not in "iu":
            raise StoreError(f"{what}: sample ids must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        bad = arr[(arr < 0) | (arr >= self._n_ids)]
        if bad.size:
            raise StoreError(f"{what}: unknown sample id(s) {bad[:10].tolist()} "
                             f"(the store has ids 0..{self._n_ids - 1})")
        return arr

    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED (others unchanged); return how many moved.

        Raises:
            StoreError: an id was never assigned.
        """
        with self._lock:
            arr = np.unique(self._ids(ids, "discard"))
            move = arr[self._status[arr] == Status.TRAINING]
            self._status[move] = Status.DISFAVOURED
            return int(move.size)

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Statuses (int8, shape of ``ids`` flattened) of ``ids``.

        Raises:
            StoreError: an id was never assigned.
        """
        with self._lock:
            return self._status[self._ids(ids, "status")].copy()

    def stats(self) -> dict[str, int]:
        """Counts ``validation training disfavoured tombstone deleted total blocks``."""
        with self._lock:
            counts = np.bincount(self._status[: self._n_ids], minlength=len(Status))
            out = {s.name.lower(): int(counts[s]) for s in Status}
            out["total"] = self._n_ids
            out["blocks"] = len(self._blocks)
            return out
