"""The sample-store contract: what a store is told on append, what it hands out, what a view reads.

* :class:`BlockMeta` — what a store learns about a block without reading it.
* :class:`SampleStore` — the training buffer: blocks of rows addressed by sample id.
* :class:`BlockRead`, :class:`Checkout` — what ``SampleStore.checkout`` returns.
* :class:`BufferView`, :class:`Fetch` — what an estimator trains from: a thread-safe, blocking
  ``fetch`` that checks out, reads and releases in one call and returns plain numpy arrays.

Shape symbols: n rows of a block, M sample ids in a store, K ids of a read, D a key's
per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kestrel_core._errors import StoreError

__all__ = ["BlockMeta", "BlockRead", "Checkout", "SampleStore", "Fetch", "BufferView"]


@dataclass(frozen=True)
class BlockMeta:
    """What a store is told about a block it appends; enough to check it without reading it.

    Attributes:
        n: number of rows.
        shapes: flat key → ``(array shape (n, *D), dtype)`` of the block's arrays (dtype as a
            ``numpy.dtype`` or its name).
        valid: bool ``(n,)``; ``False`` marks an invalid row (a NaN or ±inf in some key): the
            store gives it an id but stores it dead (TOMBSTONE), so it is never read. ``None``:
            every row is valid.
    """

    n: int
    shapes: Mapping[str, tuple[tuple[int, ...], Any]]
    valid: np.ndarray | None = None

    @classmethod
    def of(cls, arrays: Any, n: int | None = None, *, valid: np.ndarray | None = None) -> BlockMeta:
        """The metadata of a block of arrays.

        Args:
            arrays: flat key → array-like ``(n, *D)``.
            n: number of rows; default the leading dimension of the first array (0 when there
                is none).
            valid: as the attribute.

        Raises:
            StoreError: ``arrays`` is not a mapping, or a value cannot be converted to an array.
        """
        if not isinstance(arrays, Mapping):
            raise StoreError(
                f"append: expected a non-empty mapping flat key → array, got "
                f"{type(arrays).__name__}"
            )
        shapes = {}
        for key, value in arrays.items():
            try:
                arr = value if isinstance(value, np.ndarray) else np.asarray(value)
            except (TypeError, ValueError, RuntimeError) as err:
                raise StoreError(
                    f"append: key {key!r} cannot be converted to an array ({err})"
                ) from err
            shapes[key] = (tuple(arr.shape), arr.dtype)
        if n is None:
            first = next(iter(shapes.values()), ((0,), None))[0]
            n = first[0] if first else 0
        return cls(n, shapes, valid)


@dataclass(frozen=True)
class BlockRead:
    """Rows to read from one stored block.

    Attributes:
        block: store-specific handle of the block: ``{flat_key: ndarray (n_block, *D)}`` in the
            in-memory store, ``{flat_key: ObjectRef}`` in the Ray store.
        rows: int64 array, shape ``(k,)``: rows of the block, aligned with ``ids``.
        ids: int64 array, shape ``(k,)``: the sample ids those rows hold.
    """

    block: Any
    rows: np.ndarray
    ids: np.ndarray


@dataclass(frozen=True)
class Checkout:
    """Result of :meth:`SampleStore.checkout`; hold it until :meth:`SampleStore.release`.

    Attributes:
        token: identifies this checkout; pass it to ``release``.
        active_ids: int64 ``(A,)``: every id currently in the requested statuses (or a random
            subset of ``max_samples`` of them), ascending.
        new_ids: int64 ``(K,)``: the active ids not in ``held_ids``, in the order the ``reads``
            produce them (concatenating ``reads[i].ids`` gives ``new_ids``).
        reads: the blocks and rows holding ``new_ids``; each block is pinned (not released by
            the store) until this checkout is released.
    """

    token: int
    active_ids: np.ndarray
    new_ids: np.ndarray
    reads: list[BlockRead] = field(default_factory=list)


class SampleStore(Protocol):
    """The training buffer contract (in-memory store, Ray store actor behind its handle).

    Blocks are appended whole; each row becomes one sample with a new, never reused id. The
    statuses follow :func:`kestrel_core.rotate` after every append. One key schema per store:
    the first non-empty append fixes the set of flat keys, each key's per-sample shape and
    dtype kind; later appends that differ raise :class:`~kestrel_core.StoreError` and store
    nothing. Third-party stores check themselves against ``kestrel_core.testing.StoreContract``.
    """

    def append(self, block: Mapping[str, Any], meta: BlockMeta) -> np.ndarray:
        """Append a block of ``meta.n`` rows; return the new ids (int64 ``(n,)``).

        Rows that ``meta.valid`` marks invalid get ids too, but are stored dead (TOMBSTONE).

        Raises:
            StoreError: the block or its metadata breaks the key schema; nothing is stored.

        Warns:
            StoreWarning: more rows at once than ``max_samples + validation_samples``.
        """
        ...

    def checkout(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Checkout:
        """Pin and return the blocks needed to read the active ids the caller does not hold.

        Raises:
            StoreError: a key is not in the store's schema (message lists the known keys).
        """
        ...

    def release(self, token: int) -> None:
        """End a checkout; blocks whose rows are all dead and unpinned are dropped."""
        ...

    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED; other statuses are left unchanged. Returns how many moved."""
        ...

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Statuses (int8) of ``ids``."""
        ...

    def stats(self) -> dict[str, int]:
        """Counts: ``validation training disfavoured tombstone deleted total blocks``."""
        ...


@dataclass(frozen=True)
class Fetch:
    """What :meth:`BufferView.fetch` returns.

    Attributes:
        active_ids: int64 ``(A,)``: ids currently in the requested statuses.
        new_ids: int64 ``(K,)``: active ids not in ``held_ids``, aligned with ``arrays`` rows.
        arrays: flat key → ndarray ``(K, *D)``; may be read-only, never aliases data a caller
            could corrupt in the store.
    """

    active_ids: np.ndarray
    new_ids: np.ndarray
    arrays: dict[str, np.ndarray]


class BufferView(Protocol):
    """What an estimator's loader reads from; every method is safe to call from any thread."""

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
        """Checkout, read the new rows with batched reads, release. Blocking."""
        ...

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED (may return before the store applied it)."""
        ...

    def stats(self) -> dict[str, int]:
        """The store's counts (see :meth:`SampleStore.stats`)."""
        ...
