"""Ref-only traces: which blocks hold which rows, without touching the data.

A :class:`Column` is one flat key's rows as a sequence of *segments*
``(block_ref, start, stop)``: rows ``start:stop`` of the array the ref points to. A column of one
row used for ``n > 1`` samples is a *broadcast* (the observation shared by every sample); that is
recognised from the row count alone, in O(1). A :class:`RefTrace` is the columns of every flat
key for the same N samples plus each key's per-sample shape and dtype; the driver, the store and
the multiplexer compute on these without a single ``ray.get`` of data.

:func:`chunk_grid` cuts ``[0, N)`` into the blocks every node of one graph call produces, so
all keys of a trace share block boundaries and each grid chunk can be appended as one block.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kestrel_core import BlockMeta, SimulatorError, StoreError, split_key

__all__ = ["Column", "RefTrace", "chunk_grid", "split_chunks"]

#: ``(block_ref, start, stop)``: rows ``start:stop`` of the block the ref points to
Segment = tuple[Any, int, int]


@dataclass(frozen=True)
class Column:
    """One flat key's rows, as block segments in row order.

    Attributes:
        segments: ``((block_ref, start, stop), …)``.
    """

    segments: tuple[Segment, ...] = ()

    @classmethod
    def whole(cls, blocks: Iterable[tuple[Any, int]]) -> Column:
        """Column of whole blocks ``[(block_ref, n_rows), …]``."""
        return cls(tuple((ref, 0, int(n)) for ref, n in blocks))

    @property
    def n(self) -> int:
        """Number of rows."""
        return sum(stop - start for _, start, stop in self.segments)

    @property
    def refs(self) -> list[Any]:
        """The block refs, in order (a block may repeat)."""
        return [ref for ref, _, _ in self.segments]

    def is_broadcast(self, n: int) -> bool:
        """``True`` when this column is one row standing for all ``n > 1`` samples."""
        return n > 1 and self.n == 1

    def slice(self, a: int, b: int) -> Column:
        """Rows ``a:b`` of the column (segments clipped; no data touched)."""
        out, pos = [], 0
        for ref, start, stop in self.segments:
            lo, hi = max(a, pos), min(b, pos + stop - start)
            if lo < hi:
                out.append((ref, start + lo - pos, start + hi - pos))
            pos += stop - start
        return Column(tuple(out))

    def __add__(self, other: Column) -> Column:
        return Column(self.segments + other.segments)

    def payload(self) -> list[Segment]:
        """The segments as a list, ready to pass nested in an actor call (Ray does not resolve it)."""
        return list(self.segments)


@dataclass
class RefTrace:
    """The block refs of a trace of N samples.

    Attributes:
        n: number of samples N.
        columns: flat key → :class:`Column` of N rows.
        meta: flat key → ``(D_key, dtype)``: per-sample shape and dtype string.
        nonfinite: node → number of its samples holding a NaN or ±inf.
        finite: node → bool ``(N,)``: which of its samples are finite in every key (from the
            NodeWrapper's per-chunk masks); a node without an entry is finite throughout.
        errors: node → number of its samples whose simulation raised (``on_error: skip``;
            they are not ``finite`` either).
        error: node → the first of those exceptions as ``(user frames, full traceback)``.
        raised: node → bool ``(N,)``: which of its samples raised (nodes with ``errors``).
        findings: estimator node → what its observation guards found at these draws (its
            ``observation_checks``, JSON-ready dicts; nodes that found nothing are left out).
    """

    n: int
    columns: dict[str, Column] = field(default_factory=dict)
    meta: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    nonfinite: dict[str, int] = field(default_factory=dict)
    finite: dict[str, np.ndarray] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error: dict[str, tuple[str, str]] = field(default_factory=dict)
    raised: dict[str, np.ndarray] = field(default_factory=dict)
    findings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def keys(self) -> list[str]:
        """Flat keys, in insertion order."""
        return list(self.columns)

    def __contains__(self, key: object) -> bool:
        return key in self.columns

    def __getitem__(self, key: str) -> Column:
        return self.columns[key]

    def nodes(self) -> list[str]:
        """Node names present, in insertion order."""
        return list(dict.fromkeys(split_key(k)[0] for k in self.columns))

    def select(self, keys: Iterable[str]) -> RefTrace:
        """A trace with only ``keys``.

        Raises:
            KeyError: a key is missing (the message lists the trace's keys).
        """
        keys = list(keys)
        missing = [k for k in keys if k not in self.columns]
        if missing:
            raise KeyError(f"key {missing[0]!r} is not in the trace; it has {self.keys()}")
        nodes = {split_key(k)[0] for k in keys}
        return RefTrace(
            self.n,
            {k: self.columns[k] for k in keys},
            {k: self.meta[k] for k in keys},
            {m: c for m, c in self.nonfinite.items() if m in nodes},
            {m: v for m, v in self.finite.items() if m in nodes},
            {m: c for m, c in self.errors.items() if m in nodes},
            {m: t for m, t in self.error.items() if m in nodes},
            {m: r for m, r in self.raised.items() if m in nodes},
            {m: f for m, f in self.findings.items() if m in nodes},
        )

    def valid_rows(self) -> np.ndarray | None:
        """bool ``(N,)``: the samples finite in every node; ``None`` when no node reported one."""
        masks = [np.asarray(v, dtype=bool) for v in self.finite.values()]
        if not masks:
            return None
        return np.logical_and.reduce(masks) if len(masks) > 1 else masks[0]

    def check_finite(self, what: str = "simulation") -> dict[str, int]:
        """The non-finite samples per node, after checking that some sample is usable.

        Args:
            what: names the round in the message (``"initial simulation"``, …).

        Returns:
            ``{node: number of its samples with a NaN or ±inf}`` (samples whose simulation
            raised are in :attr:`errors`).

        Raises:
            SimulatorError: a node returned a non-finite value in every sample ("node 'x'
                returned a non-finite value (NaN or ±inf) in all 64 samples of the initial
                simulation"), or raised in every sample (``on_error: skip``), or no sample is
                valid in every node (names the worst node).
        """
        counts = {node: int(count) for node, count in self.nonfinite.items()}
        errors = {node: int(count) for node, count in self.errors.items()}
        if self.n == 0 or not any(counts.values()) and not any(errors.values()):
            return counts
        for node, count in counts.items():
            if count >= self.n:
                raise SimulatorError(
                    f"node {node!r} returned a non-finite value (NaN or ±inf) in all "
                    f"{self.n} samples of the {what}; check its simulator"
                )
        for node, count in errors.items():
            if count >= self.n:
                raise SimulatorError(
                    f"node {node!r}: the simulator raised in all {self.n} samples of the {what} "
                    f"(on_error: skip); the first error:\n{self.error.get(node, ('', ''))[0].rstrip()}"
                )
        valid = self.valid_rows()
        if valid is not None and not valid.any():
            counts = {
                m: counts.get(m, 0) + errors.get(m, 0) for m in dict.fromkeys([*counts, *errors])
            }
            worst = max(counts, key=lambda m: counts[m])
            raise SimulatorError(
                f"no sample of the {what} is finite in every node ({self.n} samples; "
                f"non-finite rows per node: {counts}); check node {worst!r}"
            )
        return counts

    def blocks(self) -> list[tuple[dict[str, Any], BlockMeta]]:
        """Split into store blocks ``[({flat_key: ObjectRef}, BlockMeta), …]``.

        Each block's metadata carries its rows' per-key shapes and dtypes and, when a node
        reported non-finite samples, which rows are valid (the store keeps the others dead).

        Raises:
            StoreError: the keys do not share block boundaries, or a segment is part of a block
                (only whole blocks, as NodeWrappers return them, can be stored).
        """
        keys = self.keys()
        if not keys or self.n == 0:
            return []
        first = self.columns[keys[0]].segments
        bounds = [(start, stop) for _, start, stop in first]
        for key in keys:
            segs = self.columns[key].segments
            if [(s, e) for _, s, e in segs] != bounds or any(s != 0 for _, s, _ in segs):
                raise StoreError(
                    f"key {key!r} is not stored in the same whole blocks as key {keys[0]!r} "
                    f"(rows {[(s, e) for _, s, e in segs]} vs {bounds}); only traces made by one "
                    "DeployedGraph call can be appended"
                )
        valid = self.valid_rows()
        if valid is not None and valid.all():
            valid = None
        out, pos = [], 0
        for i, (start, stop) in enumerate(bounds):
            n = stop - start
            shapes = {k: ((n, *self.meta[k][0]), self.meta[k][1]) for k in keys}
            out.append(
                (
                    {k: self.columns[k].segments[i][0] for k in keys},
                    BlockMeta(n, shapes, None if valid is None else valid[pos : pos + n]),
                )
            )
            pos += n
        return out


def chunk_grid(n: int, plans: Iterable[tuple[int, int]]) -> list[int]:
    """Common block sizes for one graph call of ``n`` samples.

    Each node cuts ``[0, n)`` into ``num_actors`` replica slices at ``int(i·n/k)`` and each slice
    into chunks of at most ``sample_chunk_size`` rows (0 = no limit). The grid is the union of
    every node's cuts, so each node's chunks are unions of grid chunks and every flat key of the
    trace shares the same blocks.

    Args:
        n: number of samples (≥ 0).
        plans: ``(sample_chunk_size, num_actors)`` per node taking part.

    Returns:
        Positive chunk sizes summing to ``n`` (empty for ``n = 0``).

    Example:
        >>> chunk_grid(10, [(4, 1), (0, 2)])
        [4, 1, 3, 2]
    """
    if n <= 0:
        return []
    cuts = {0, n}
    for size, k in plans:
        k = max(1, int(k))
        edges = [int(i * n / k) for i in range(k)] + [n]
        for a, b in zip(edges, edges[1:]):
            cuts.add(a)
            if size and size > 0:
                cuts.update(range(a, b, int(size)))
    pts = sorted(cuts)
    return [b - a for a, b in zip(pts, pts[1:])]


def split_chunks(chunks: Sequence[int], a: int, b: int) -> list[int]:
    """The chunk sizes covering rows ``a:b`` of a grid, cutting chunks at ``a`` and ``b``.

    Example:
        >>> split_chunks([4, 4, 2], 2, 9)
        [2, 4, 1]
    """
    out, pos = [], 0
    for c in chunks:
        lo, hi = max(a, pos), min(b, pos + c)
        if lo < hi:
            out.append(hi - lo)
        pos += c
    return out


def merge_meta(
    metas: Sequence[Mapping[str, tuple[Sequence[int], str]]], node: str
) -> dict[str, tuple[tuple[int, ...], str]]:
    """Combine the per-field ``(D, dtype)`` of several calls (replicas) of one node.

    Raises:
        StoreError: replicas disagree on a field's per-sample shape.
    """
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for meta in metas:
        for fld, (shape, dtype) in meta.items():
            shape = tuple(int(d) for d in shape)
            if fld in out and out[fld][0] != shape:
                raise StoreError(
                    f"node {node!r}, field {fld!r}: replicas returned per-sample shapes "
                    f"{out[fld][0]} and {shape}"
                )
            prev = out.get(fld, (shape, dtype))[1]
            out[fld] = (shape, str(np.result_type(np.dtype(prev), np.dtype(dtype))))
    return out
