"""The sample store on numpy blocks in one process.

:class:`InMemoryStore` is :class:`~._base.BlockStore` with blocks of read-only numpy copies —
the Ray store actor of kestrel-ray is the same class with ObjectRefs — so both keep one
lifecycle and run one contract suite (:class:`kestrel_core.testing.StoreContract`). Tests, GPU
benchmarks and small jobs use it. Shape symbols: n rows in a block, D a key's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError, StoreError
from kestrel_core.execute._boundary import check_count
from kestrel_core.store._base import BlockStore
from kestrel_core.store._meta import Schema
from kestrel_core.store._protocol import BlockMeta
from kestrel_core.store._view import InMemoryBufferView

__all__ = ["InMemoryStore"]


class InMemoryStore(BlockStore):
    """Training buffer of numpy blocks; thread-safe (one lock).

    Each appended block is stored as C-contiguous, native-endian, read-only copies. Everything
    else — ids, statuses, key schema, invalid rows, snapshots — is :class:`~._base.BlockStore`.

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

    def __init__(
        self,
        *,
        min_samples: int,
        max_samples: int,
        validation_samples: int,
        snapshot_every: int = 0,
        snapshot_dir: str | Path | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(
            min_samples=min_samples,
            max_samples=max_samples,
            validation_samples=validation_samples,
            snapshot_every=snapshot_every,
            snapshot_dir=snapshot_dir,
            seed=seed,
        )
        rules = self._index.rules
        self.min_samples = rules["min_samples"]
        self.max_samples = rules["max_samples"]
        self.validation_samples = rules["validation_samples"]
        self.snapshot_every = self._snapshot_every
        self.snapshot_dir = self._snapshot_dir

    @classmethod
    def from_config(
        cls, buffer_config: Any, snapshot_dir: str | Path | None = None, *, seed: int | None = None
    ) -> InMemoryStore:
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
        return cls(
            **values,
            snapshot_every=get("snapshot_every", 0) or 0,
            snapshot_dir=snapshot_dir,
            seed=seed,
        )

    @property
    def schema(self) -> Schema:
        """Flat key → (per-sample shape, native dtype of the first append); empty before it."""
        return self._schema_copy() or {}

    @property
    def open_checkouts(self) -> int:
        """Number of checkouts not yet released."""
        with self._lock:
            return self._index.open_checkouts

    def view(self) -> InMemoryBufferView:
        """A :class:`~kestrel_core.BufferView` on this store."""
        return InMemoryBufferView(self)

    def append(self, block: Mapping[str, Any], meta: BlockMeta | int) -> np.ndarray:
        """Append a block of arrays; return the new ids (int64 ``(n,)``).

        Args:
            block: flat key → array ``(n, *D)`` (anything ``np.asarray`` takes); copied.
            meta: its :class:`~kestrel_core.BlockMeta`, or just ``n`` (then the metadata is
                read from the arrays: every row valid).

        Raises:
            StoreError: a key is malformed, missing or extra; a leading dimension is not ``n``;
                a per-sample shape or dtype kind differs from the schema; an array differs
                from its metadata; nothing is stored.
            CountError: ``n`` is not a non-negative integer.

        Warns:
            StoreWarning: ``n > max_samples + validation_samples``: the oldest rows of this
                very block become TOMBSTONE at once.
        """
        if not isinstance(meta, BlockMeta):
            meta = BlockMeta.of(block, check_count(meta))
        return super().append(block, meta)

    def _accept(
        self, block: Mapping[str, Any], meta: BlockMeta, spec: Schema
    ) -> dict[str, np.ndarray]:
        out = {}
        for key, value in block.items():
            try:
                arr = np.asarray(value)
            except (TypeError, ValueError, RuntimeError) as err:
                raise StoreError(
                    f"append: key {key!r} cannot be converted to an array ({err})"
                ) from err
            shape, dtype = tuple(meta.shapes[key][0]), spec[key][1]
            copy = np.array(arr, order="C", copy=True)
            if not copy.dtype.isnative:
                copy = copy.astype(copy.dtype.newbyteorder("="))
            if copy.shape != shape or copy.dtype != dtype:
                raise StoreError(
                    f"append: key {key!r} holds an array of shape {arr.shape}, dtype "
                    f"{arr.dtype}; its metadata says {shape}, {dtype}"
                )
            copy.flags.writeable = False
            out[key] = copy
        return out

    def _read(self, handle: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return handle
