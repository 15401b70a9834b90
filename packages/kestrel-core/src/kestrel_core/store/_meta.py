"""The key schema of a store, and the check of a block's metadata against it.

One key schema per store: the first non-empty append fixes the flat keys, each key's
per-sample shape and dtype kind; :func:`check_block` checks every later block against it —
on metadata only, so a store that never sees the data (the Ray store) checks exactly what the
in-memory store checks — before anything is stored.

A run knows some keys' per-sample shapes before its first block: from the dry run before Ray
starts, or from a node's observation (:func:`kestrel.preflight._dryrun.expected_keys`). Given to the
store as :class:`Expected` entries (:meth:`~kestrel_core.store.BlockStore.expect`), they are
checked at every append and every restore too, so a simulator whose per-sample shape changes
between calls (``(3,)`` in the dry run, ``(4,)`` on Ray) is refused at its first block, named::

    node 'x' (model.Wide), key 'x.value': a block of 64 new rows has per-sample shape (4,),
    expected (3,) (fixed by its observation); nothing of it was stored
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kestrel_core._errors import KestrelError, StoreError
from kestrel_core.execute._boundary import check_count
from kestrel_core.graph._trace import split_key
from kestrel_core.store._protocol import BlockMeta

__all__ = ["Schema", "Expected", "check_block", "check_expected"]

#: flat key → (per-sample shape D, native dtype of the first append)
Schema = dict[str, tuple[tuple[int, ...], np.dtype]]


@dataclass(frozen=True)
class Expected:
    """What a key of a run holds per sample, known before the store's first block.

    Attributes:
        shape: the per-sample shape ``D``.
        dtype: the dtype whose kind (float, int, complex, bool) the key keeps; ``None``: any
            numeric kind (a shape fixed by an observation, whose dtype need not be the
            simulator's).
        node: the node as messages name it, e.g. ``"node 'x' (model.Wide)"``.
        source: what fixed it, e.g. ``"its observation"`` (messages say "fixed by …").
    """

    shape: tuple[int, ...]
    dtype: np.dtype | None
    node: str
    source: str


def check_block(
    block: Any,
    meta: Any,
    schema: Schema | None,
    expected: Mapping[str, Expected] | None = None,
    *,
    what: str = "",
) -> Schema:
    """Check a block's keys and metadata against the store's key schema.

    Args:
        block: flat key → the store's value for that key (array, ObjectRef, …); only its keys
            are looked at.
        meta: the block's :class:`~kestrel_core.BlockMeta`.
        schema: the store's schema, or ``None`` before the first non-empty append.
        expected: per-sample shapes (and dtype kinds) some keys must have whatever
            ``schema`` is (:meth:`~kestrel_core.store.BlockStore.expect`).
        what: the rows, for messages (default ``"a block of <n> new rows"``).

    Returns:
        The block's own schema ``{flat_key: (D, native dtype)}`` (the store's schema when
        ``schema`` is ``None`` and the block has rows).

    Raises:
        StoreError: ``block`` is not a non-empty mapping; ``meta`` is not a BlockMeta or its keys
            differ from the block's; a malformed key; a leading dimension other than ``n``; a
            non-numeric dtype; a ``valid`` mask that is not ``(n,)``; a key set, per-sample
            shape or dtype kind that differs from ``schema`` or ``expected`` (the message
            names the node, the key, both values and what fixed the expected one).
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
    what = what or f"a block of {n} new rows"
    if expected:
        check_expected(out, expected, what)
    if schema is not None:
        _match(out, schema, what)
    return out


def check_expected(block: Schema, expected: Mapping[str, Expected], what: str) -> None:
    """Check the keys of ``block`` (a block's own schema) that ``expected`` names.

    Raises:
        StoreError: a per-sample shape or dtype kind differs (naming the node, key, both values
            and what fixed the expected one).
    """
    for key, (shape, dtype) in block.items():
        want = expected.get(key)
        if want is None:
            continue
        if shape != tuple(want.shape):
            raise StoreError(
                f"{want.node}, key {key!r}: {what} has per-sample shape {shape}, expected "
                f"{tuple(want.shape)} (fixed by {want.source}); nothing of it was stored"
            )
        if want.dtype is not None and dtype.kind != np.dtype(want.dtype).kind:
            raise StoreError(
                f"{want.node}, key {key!r}: {what} has dtype {dtype}, expected the kind of "
                f"{np.dtype(want.dtype)} (fixed by {want.source}); nothing of it was stored"
            )


def _node(key: str) -> str:
    return f"node {key.rpartition('.')[0]!r}, "


def _match(block: Schema, schema: Schema, what: str) -> None:
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
                f"{_node(key)}key {key!r}: {what} has per-sample shape {shape}, expected "
                f"{want} (fixed by the store's first block); nothing of it was stored"
            )
        if dtype.kind != want_dtype.kind:
            raise StoreError(
                f"{_node(key)}key {key!r}: {what} has dtype {dtype}, expected the kind of "
                f"{want_dtype} (fixed by the store's first block); nothing of it was stored"
            )
