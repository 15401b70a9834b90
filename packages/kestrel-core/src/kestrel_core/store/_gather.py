"""Row gathering: the rows of a checkout, copied once into fresh arrays in ``new_ids`` order.

Every buffer view reads through :func:`read_checkout`; views differ only in how a block's
value becomes an array (``resolve``: nothing to do in memory, one batched get in Ray). Shape
symbols: K rows read, D a key's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kestrel_core._errors import StoreError
from kestrel_core.store._meta import Schema
from kestrel_core.store._protocol import BlockRead, Checkout

__all__ = ["read_checkout", "read_groups", "gather_rows", "empty_spec"]


def read_checkout(
    checkout: Checkout,
    keys: Sequence[str],
    resolve: Callable[[list[Any]], list[Any]],
    empty: Callable[[str], tuple[tuple[int, ...], Any]],
    *,
    schema: Schema | None = None,
    max_bytes: int | None = None,
) -> dict[str, np.ndarray]:
    """The new rows of a checkout for every key.

    With the store's ``schema`` and ``max_bytes``, the reads are resolved in groups: consecutive
    reads whose blocks take at most ``max_bytes`` together (:func:`read_groups`; at least one
    read a group), each group's rows copied out and its values
    dropped before the next is asked for. A read of more than the object store holds then never
    asks it for every block at once: on Ray 2.60 with a 512 MiB store, one ``ray.get`` of 1.6 GB
    of spilled blocks took 5–10 s where groups of 128 MiB took 0.6–2 s (RESULTS.md, "Beyond the
    object store").

    Args:
        checkout: a store's checkout (its blocks pinned while this runs).
        keys: flat keys to read (each in the checkout's blocks).
        resolve: ``[read.block[key] for read in group for key in keys]`` → their arrays, in the
            same order (called once per group; not at all for an empty checkout).
        empty: key → ``(D, dtype)`` of a key without rows to read.
        schema: the store's key schema (sizes the blocks; keys it lacks count 0 bytes).
        max_bytes: the most block bytes one ``resolve`` call may ask for; ``None``: one call.

    Returns:
        flat key → new, writable, C-contiguous array ``(K, *D)``, rows in ``new_ids`` order.

    Raises:
        StoreError: blocks of one key disagree on the per-sample shape, or a row is outside
            its block.
    """
    keys = list(keys)
    reads = checkout.reads
    if not reads:
        out = {}
        for key in keys:
            shape, dtype = empty(key)
            out[key] = np.empty((0, *shape), dtype)
        return out
    rows = [Gathered(key, len(checkout.new_ids)) for key in keys]
    for group in read_groups(reads, keys, schema, max_bytes):
        values = resolve([read.block[key] for read in group for key in keys])
        for j, gathered in enumerate(rows):
            gathered.add(
                [(np.asarray(values[i * len(keys) + j]), read.rows) for i, read in enumerate(group)]
            )
        del values  # the group's blocks may leave the store's memory before the next is read
    return {g.key: g.result() for g in rows}


def read_groups(
    reads: Sequence[BlockRead],
    keys: Sequence[str],
    schema: Schema | None,
    max_bytes: int | None,
) -> list[Sequence[BlockRead]]:
    """``reads`` cut into consecutive groups of at most ``max_bytes`` of blocks (≥ 1 read each).

    A block's bytes are estimated from the rows read and the schema: ``max(rows) + 1`` rows of
    every key's per-sample shape and dtype — exact for a whole block of the schema's dtypes, a
    lower bound for part of a block.
    """
    if max_bytes is None or not schema or not reads:
        return [reads]
    per_row = sum(_row_bytes(*schema[key]) for key in keys if key in schema)
    groups: list[Sequence[BlockRead]] = []
    start, size = 0, 0
    for i, read in enumerate(reads):
        nbytes = per_row * (int(read.rows.max()) + 1 if len(read.rows) else 0)
        if i > start and size + nbytes > max_bytes:
            groups.append(reads[start:i])
            start, size = i, 0
        size += nbytes
    groups.append(reads[start:])
    return groups


class Gathered:
    """One key's output array, filled group by group in ``new_ids`` order.

    Args:
        key: the flat key (for messages).
        k: total number of rows.
    """

    def __init__(self, key: str, k: int):
        self.key = key
        self.k = k
        self.out: np.ndarray | None = None
        self.pos = 0

    def add(self, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Copy rows ``rows`` of each block of ``parts`` (``(block (n_block, *D), int64 rows)``).

        Raises:
            StoreError: the blocks disagree on D (with each other or with earlier groups), or a
                row is outside its block.
        """
        shapes = {a.shape[1:] for a, _ in parts}
        if self.out is not None:
            shapes.add(self.out.shape[1:])
        if len(shapes) != 1:
            raise StoreError(
                f"key {self.key!r}: stored blocks have per-sample shapes {sorted(shapes)}"
            )
        dtype = np.result_type(*(a.dtype for a, _ in parts))
        if self.out is None:
            self.out = np.empty((self.k, *parts[0][0].shape[1:]), dtype)
        elif np.result_type(self.out.dtype, dtype) != self.out.dtype:  # a wider dtype: widen
            self.out = self.out.astype(np.result_type(self.out.dtype, dtype))
        self.pos = _copy_rows(self.key, parts, self.out, self.pos)

    def result(self) -> np.ndarray:
        """The array ``(k, *D)`` (rows beyond those added are uninitialised)."""
        assert self.out is not None, "at least one group added"
        return self.out


def gather_rows(key: str, parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> np.ndarray:
    """Rows ``rows`` of each block, in order, copied once into a new array ``(k, *D)``.

    Args:
        key: the flat key (for messages).
        parts: ``(block array (n_block, *D), int64 rows)`` per block; at least one.
        k: total number of rows.

    Raises:
        StoreError: the blocks disagree on D, or a row is outside its block.
    """
    gathered = Gathered(key, k)
    gathered.add(parts)
    return gathered.result()


def _row_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one row of per-sample shape ``shape`` and ``dtype``."""
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _copy_rows(
    key: str, parts: Sequence[tuple[np.ndarray, np.ndarray]], out: np.ndarray, pos: int
) -> int:
    """Copy the rows of ``parts`` into ``out[pos:]``; returns the position after them."""
    for block, rows in parts:
        if len(rows) and (rows.min() < 0 or rows.max() >= block.shape[0]):
            raise StoreError(
                f"key {key!r}: rows {rows.min()}..{rows.max()} outside a stored block "
                f"of {block.shape[0]} rows"
            )
        if block.dtype == out.dtype:
            # mode="clip" (bounds checked above): with the default "raise" numpy buffers `out`
            # and copies every row twice, four times slower for a block of 128 × 1000 float64
            np.take(block, rows, axis=0, out=out[pos : pos + len(rows)], mode="clip")
        else:
            out[pos : pos + len(rows)] = block[rows]
        pos += len(rows)
    return pos


def empty_spec(
    schema: Mapping[str, tuple[tuple[int, ...], Any]] | None, key: str
) -> tuple[tuple[int, ...], Any]:
    """``(D, dtype)`` of ``key`` in ``schema``; ``((), float64)`` for a key the store has not seen."""
    if schema and key in schema:
        return schema[key]
    return (), np.float64
