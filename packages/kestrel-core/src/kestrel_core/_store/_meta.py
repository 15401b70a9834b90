"""The key schema of a store, and the check of a block's metadata against it.

One key schema per store: the first non-empty append fixes the flat keys, each key's
per-sample shape and dtype kind; :func:`check_block` checks every later block against it —
on metadata only, so a store that never sees the data (the Ray store) checks exactly what the
in-memory store checks — before anything is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._boundary import check_count
from .._errors import KestrelError, StoreError
from .._trace import split_key
from ._protocol import BlockMeta

__all__ = ["Schema", "check_block"]

#: flat key → (per-sample shape D, native dtype of the first append)
Schema = dict[str, tuple[tuple[int, ...], np.dtype]]


def check_block(block: Any, meta: Any, schema: Schema | None) -> Schema:
    """Check a block's keys and metadata against the store's key schema.

    Args:
        block: flat key → the store's value for that key (array, ObjectRef, …); only its keys
            are looked at.
        meta: the block's :class:`~kestrel_core.BlockMeta`.
        schema: the store's schema, or ``None`` before the first non-empty append.

    Returns:
        The block's own schema ``{flat_key: (D, native dtype)}`` (the store's schema when
        ``schema`` is ``None`` and the block has rows).

    Raises:
        StoreError: ``block`` is not a non-empty mapping; ``meta`` is not a BlockMeta or its keys
            differ from the block's; a malformed key; a leading dimension other than ``n``; a
            non-numeric dtype; a ``valid`` mask that is not ``(n,)``; a key set, per-sample
            shape or dtype kind that differs from ``schema`` (the message names the key and
            both values).
        CountError: ``meta.n`` is not a non-negative integer.
    """
    if not isinstance(block, Mapping) or not block:
        raise StoreError(
            f"append: expected a non-empty mapping flat key → array, got {type(block).__name__}"
        )
    if not isinstance(meta, BlockMeta):
        raise StoreError(f"append: expected a BlockMeta with the block, got {type(meta).__name__}")
    n = check_count(meta.n)
    if set(block) != set(meta.shapes):
        raise StoreError(
            f"append: block keys {sorted(block)} differ from the keys of its metadata "
            f"{sorted(meta.shapes)}"
        )
    out: Schema = {}
    for key, (shape, dtype) in meta.shapes.items():
        try:
            split_key(key)
        except (KestrelError, AttributeError, TypeError) as err:
            raise StoreError(f"append: key {key!r} is not a flat key '<node>.<field>'") from err
        shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
        if not shape or shape[0] != n:
            raise StoreError(
                f"append: key {key!r} has shape {shape}; expected leading dimension {n}"
            )
        if dtype.kind not in "biufc":
            raise StoreError(f"append: key {key!r} has non-numeric dtype {dtype}")
        out[key] = (shape[1:], dtype.newbyteorder("=") if not dtype.isnative else dtype)
    if meta.valid is not None and np.shape(meta.valid) != (n,):
        raise StoreError(
            f"append: the valid-row mask has shape {np.shape(meta.valid)}; expected ({n},)"
        )
    if schema is not None:
        _match(out, schema)
    return out


def _match(block: Schema, schema: Schema) -> None:
    missing, extra = sorted(set(schema) - set(block)), sorted(set(block) - set(schema))
    if missing or extra:
        raise StoreError(
            f"append: block keys do not match the store's schema: missing {missing}, "
            f"extra {extra}; the store holds {sorted(schema)}"
        )
    for key, (shape, dtype) in block.items():
        want, want_dtype = schema[key]
        if shape != want:
            raise StoreError(
                f"append: key {key!r} has per-sample shape {shape}; the store's schema "
                f"(fixed by the first append) has {want}"
            )
        if dtype.kind != want_dtype.kind:
            raise StoreError(
                f"append: key {key!r} has dtype {dtype}; the store's schema has {want_dtype}"
            )
