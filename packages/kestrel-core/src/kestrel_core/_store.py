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
from pathlib import Path
from typing import Any

import numpy as np

from ._blocks import BlockIndex
from ._boundary import check_count
from ._errors import ConfigError, StoreError
from ._protocols import BlockRead, Checkout
from ._store_schema import Schema, buffer_int, validate_block, write_snapshots
from ._store_view import InMemoryBufferView

__all__ = ["InMemoryStore", "StoreWarning"]

class StoreWarning(UserWarning):
    """A store operation works but wastes data (e.g. an append larger than the buffer)."""


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
        self._index = BlockIndex(min_samples=self.min_samples, max_samples=self.max_samples,
                                 validation_samples=self.validation_samples, seed=seed)
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

    @property
    def open_checkouts(self) -> int:
        """Number of checkouts not yet released."""
        with self._lock:
            return self._index.open_checkouts

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
            ids = self._index.append(arrays, n)
            write_snapshots(self.snapshot_dir, self.snapshot_every, arrays, int(ids[0]), n)
            return ids

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
        keys = list(keys)
        with self._lock:
            if self._schema is not None:
                unknown = [k for k in keys if k not in self._schema]
                if unknown:
                    raise StoreError(f"checkout: unknown key(s) {unknown}; the store holds "
                                     f"{sorted(self._schema)}")
            token, active, new, reads = self._index.checkout(statuses, max_samples=max_samples,
                                                              held_ids=held_ids)
        reads = [BlockRead(block={k: arrays[k] for k in keys}, rows=rows, ids=ids)
                 for arrays, rows, ids in reads]
        return Checkout(token=token, active_ids=active, new_ids=new, reads=reads)

    def release(self, token: int) -> None:
        """End a checkout; its blocks become collectable.

        Raises:
            StoreError: unknown token (never issued, or already released).
        """
        with self._lock:
            self._index.release(token)

    # -- statuses ---------------------------------------------------------------------------

    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED (others unchanged); return how many moved.

        Raises:
            StoreError: an id was never assigned.
        """
        with self._lock:
            return self._index.discard(ids)

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Statuses (int8, shape of ``ids`` flattened) of ``ids``.

        Raises:
            StoreError: an id was never assigned.
        """
        with self._lock:
            return self._index.status(ids)

    def stats(self) -> dict[str, int]:
        """Counts ``validation training disfavoured tombstone deleted total blocks``."""
        with self._lock:
            return self._index.stats()
