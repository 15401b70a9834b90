"""Helpers of :class:`~kestrel_core.InMemoryStore`: buffer values, the key schema, snapshots.

One key schema per store: the first non-empty append fixes the flat keys, each key's
per-sample shape and dtype kind; :func:`validate_block` checks every later block against it
before anything is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._boundary import check_count
from ._errors import ConfigError, KestrelError, StoreError
from ._trace import split_key

__all__ = ["Schema", "buffer_int", "validate_block", "write_snapshots"]

#: flat key → (per-sample shape, dtype of the first append)
Schema = dict[str, tuple[tuple[int, ...], np.dtype]]


def buffer_int(value: Any, name: str, minimum: int) -> int:
    """A ``buffer.<name>`` count ≥ ``minimum``; ConfigError otherwise."""
    try:
        out = check_count(value, name)
    except KestrelError as err:
        raise ConfigError(f"buffer.{name}: {err}") from err
    if out < minimum:
        raise ConfigError(f"buffer.{name} must be ≥ {minimum}, got {out}")
    return out


def validate_block(block: Mapping[str, Any], n: int, schema: Schema | None) -> dict[str, np.ndarray]:
    """Check a block against the store's key schema and return read-only native copies.

    Args:
        block: flat key → array-like ``(n, *D)``.
        n: number of rows.
        schema: the store's schema, or ``None`` before the first append.

    Returns:
        flat key → C-contiguous, native-endian, read-only copy ``(n, *D)``.

    Raises:
        StoreError: not a non-empty mapping; a malformed, missing or extra key; a leading
            dimension other than ``n``; a non-numeric dtype; a per-sample shape or dtype kind
            that differs from ``schema`` (the message names the key and both values).
    """
    if not isinstance(block, Mapping) or not block:
        raise StoreError(f"append: expected a non-empty mapping flat key → array, got {type(block).__name__}")
    arrays = {}
    for key, value in block.items():
        try:
            split_key(key)
        except (KestrelError, AttributeError, TypeError) as err:
            raise StoreError(f"append: key {key!r} is not a flat key '<node>.<field>'") from err
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise StoreError(f"append: key {key!r} cannot be converted to an array ({err})") from err
        if arr.ndim == 0 or arr.shape[0] != n:
            raise StoreError(f"append: key {key!r} has shape {arr.shape}; expected leading dimension {n}")
        if arr.dtype.kind not in "biufc":
            raise StoreError(f"append: key {key!r} has non-numeric dtype {arr.dtype}")
        arrays[key] = arr
    if schema is not None:
        missing = sorted(set(schema) - set(arrays))
        extra = sorted(set(arrays) - set(schema))
        if missing or extra:
            raise StoreError(
                f"append: block keys do not match the store's schema: missing {missing}, "
                f"extra {extra}; the store holds {sorted(schema)}")
        for key, arr in arrays.items():
            shape, dtype = schema[key]
            if arr.shape[1:] != shape:
                raise StoreError(
                    f"append: key {key!r} has per-sample shape {arr.shape[1:]}; the store's "
                    f"schema (fixed by the first append) has {shape}")
            if arr.dtype.kind != dtype.kind:
                raise StoreError(
                    f"append: key {key!r} has dtype {arr.dtype}; the store's schema has {dtype}")
    out = {}
    for key, arr in arrays.items():
        copy = np.array(arr, order="C", copy=True)
        if not copy.dtype.isnative:
            copy = copy.astype(copy.dtype.newbyteorder("="))
        copy.flags.writeable = False
        out[key] = copy
    return out


def write_snapshots(directory: Path | None, every: int, arrays: dict[str, np.ndarray], start: int,
                    n: int) -> None:
    """Save every ``every``-th sample (1-based global index ``start + row + 1``) of a block as
    ``directory/<sample id:06d>.npz`` with its per-sample arrays (no batch axis)."""
    if not every:
        return
    first = -(start + 1) % every  # row whose 1-based global index is a multiple of every
    rows = range(first, n, every)
    if not rows or directory is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    for row in rows:
        np.savez(directory / f"{start + row:06d}.npz", **{k: a[row] for k, a in arrays.items()})
