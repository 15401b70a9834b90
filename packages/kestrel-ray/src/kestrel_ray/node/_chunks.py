"""The data side of a node actor's call: condition segments in, chunk blocks out.

Shape symbols: n samples of a call, c rows of a chunk, D a field's per-sample shape.

* :func:`condition_refs` / :func:`assemble_conditions` turn the segments ``[(block_ref, start,
  stop), …]`` a call receives into one read-only array per condition, of 1 (broadcast) or n
  rows — the refs resolved in one batched wait, through a :class:`BroadcastMemo` that keeps
  one-row blocks (observations) so that each is read once per actor, not once per call;
* :func:`spans` / :func:`rows_of` cut a call into chunks;
* :func:`skipped_values` completes the chunks of a call in which samples raised
  (``on_error: skip``);
* :func:`pack_records` checks the chunks' records against each other and lays them out as the
  call's return values (one array per chunk and field, then the metadata with each chunk's
  finite-row mask).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kestrel_core import ShapeError, finite_rows
from kestrel_core.internal import format_full, skipped_values

__all__ = [
    "BroadcastMemo",
    "condition_refs",
    "assemble_conditions",
    "spans",
    "rows_of",
    "skipped_values",
    "format_full",
    "pack_records",
]


class BroadcastMemo:
    """One-row blocks remembered by ref, least recently used dropped first.

    An ObjectRef's value never changes, so a remembered block is always current.

    Args:
        size: how many one-row blocks to keep.
    """

    def __init__(self, size: int):
        self.size = int(size)
        self._blocks: dict[Any, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._blocks)

    async def fetch(self, refs: list[Any]) -> list[Any]:
        """The values of ``refs`` in order: one ``asyncio.gather`` for those not remembered."""
        memo = self._blocks
        missing = [ref for ref in refs if ref not in memo]
        fetched = dict(zip(missing, await asyncio.gather(*missing))) if missing else {}
        values = []
        for ref in refs:
            if ref in fetched:
                block = fetched[ref]
                if not (isinstance(block, np.ndarray) and block.ndim and block.shape[0] == 1):
                    values.append(block)
                    continue
            else:
                block = memo.pop(ref)
            memo[ref] = block
            values.append(block)
        while len(memo) > self.size:
            del memo[next(iter(memo))]
        return values


def condition_refs(node: str, conditions: Mapping[str, list], n: int) -> list[Any]:
    """The distinct block refs of ``conditions``, in first-use order.

    Raises:
        ShapeError: a condition has neither 1 nor ``n`` rows (naming the node and condition).
    """
    unique: dict[Any, None] = {}
    for name, segments in conditions.items():
        rows = sum(int(stop) - int(start) for _, start, stop in segments)
        if rows not in (1, n):
            raise ShapeError(
                f"node {node!r}: condition {name!r} has leading dimension "
                f"{rows}; expected 1 (broadcast) or {n}"
            )
        for ref, _, _ in segments:
            unique.setdefault(ref, None)
    return list(unique)


def assemble_conditions(
    node: str, conditions: Mapping[str, list], blocks: Mapping[Any, Any]
) -> dict[str, np.ndarray]:
    """Condition name → read-only array of its segments' rows (1 or n rows).

    Args:
        node: the node (for messages). conditions: name → segments. blocks: ref → its value.

    Raises:
        ShapeError: a block is not an array holding the segment's rows.
    """
    out = {}
    for name, segments in conditions.items():
        parts = []
        for ref, start, stop in segments:
            block = blocks[ref]
            if not isinstance(block, np.ndarray) or block.ndim == 0 or block.shape[0] < stop:
                raise ShapeError(
                    f"node {node!r}: condition {name!r} block of shape "
                    f"{np.shape(block)} has no rows {start}:{stop}"
                )
            parts.append(block[start:stop])
        arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
        view = arr.view()
        view.flags.writeable = False
        out[name] = view
    return out


def spans(chunks: Sequence[int]) -> list[tuple[int, int]]:
    """``[(start, c), …]`` of consecutive chunks of sizes ``chunks``."""
    out, pos = [], 0
    for c in chunks:
        out.append((pos, int(c)))
        pos += int(c)
    return out


def rows_of(arr: np.ndarray, a: int, c: int, n: int) -> np.ndarray:
    """Rows ``a:a+c`` of a condition; a broadcast stays ``(1, …)``."""
    return arr if arr.shape[0] == 1 and n > 1 else arr[a : a + c]


def pack_records(
    node: str,
    fields: Sequence[str],
    records: list[dict[str, np.ndarray]],
    raised: Sequence[np.ndarray] | None = None,
    error: tuple[str, str] | None = None,
) -> tuple:
    """The return values of a call: ``len(records) × len(fields)`` arrays, chunk-major, then
    ``{"fields": {field: (D, dtype name)}, "nonfinite": int, "finite": [bool (c,) per chunk],
    "errors": int, "error": (str, str) | None}``.

    Each field gets one dtype over the chunks (``np.result_type``). ``raised`` (bool ``(c,)``
    per chunk, ``on_error: skip``) marks the rows whose simulation raised: they count as
    ``errors``, not as ``nonfinite``, and are not ``finite`` (the store keeps them dead);
    ``error`` is the first such exception as ``(user frames, full traceback)`` texts.

    Raises:
        ShapeError: chunks disagree on a field's per-sample shape (naming node, key, chunk).
    """
    meta: dict[str, tuple[tuple[int, ...], str]] = {}
    for f in fields:
        shapes = [r[f].shape[1:] for r in records]
        bad = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
        if bad is not None:
            raise ShapeError(
                f"node {node!r}, key '{node}.{f}': chunk {bad} has "
                f"per-sample shape {shapes[bad]}, chunk 0 has {shapes[0]}"
            )
        dtype = np.result_type(*(r[f].dtype for r in records))
        for r in records:
            r[f] = r[f].astype(dtype, copy=False)
        meta[f] = (tuple(int(d) for d in shapes[0]), dtype.name)
    finite = [finite_rows(r) for r in records]  # per chunk: rows finite in every field
    failed = list(raised) if raised is not None else [np.zeros(len(ok), bool) for ok in finite]
    nonfinite = sum(int((~ok & ~bad).sum()) for ok, bad in zip(finite, failed))
    errors = sum(int(bad.sum()) for bad in failed)
    finite = [ok & ~bad for ok, bad in zip(finite, failed)]
    flat = [r[f] for r in records for f in fields]
    meta_out = {"fields": meta, "nonfinite": nonfinite, "finite": finite}
    raised_out = {"raised": failed} if errors else {}  # per chunk: the rows that raised
    return (*flat, {**meta_out, "errors": errors, "error": error if errors else None, **raised_out})
