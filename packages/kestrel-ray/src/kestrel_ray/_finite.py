"""Keeping non-finite simulations out of the buffer (case K09).

Every node call reports how many of its rows hold a NaN or ±inf (``RefTrace.nonfinite``), so
the driver knows without reading data whether a trace is clean. Only when it is not, each of
its blocks goes through :func:`drop_nonfinite`: a Ray task that reads the block, keeps the rows
finite in every key and returns the kept rows as new objects. They are return values, so the
driver owns them, as it owns the blocks the node actors return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import ray
from kestrel_core import SimulatorError, finite_rows

from ._refs import Column, RefTrace

__all__ = ["drop_nonfinite", "count_nonfinite", "merge_counts"]


def _filter_block(keys: list[str], *arrays: np.ndarray) -> tuple:
    """Task body: the rows of one block finite in every key, then the number kept."""
    ok = finite_rows(dict(zip(keys, arrays)))
    kept = int(ok.sum())
    return (*(np.ascontiguousarray(a[ok]) for a in arrays), kept)


_filter_task: Any = None


def _task() -> Any:
    global _filter_task
    if _filter_task is None:
        _filter_task = ray.remote(num_cpus=0)(_filter_block)
    return _filter_task


def count_nonfinite(trace: RefTrace) -> dict[str, int]:
    """``{node: number of its rows with a non-finite value}`` of a trace (no data read)."""
    return {node: int(count) for node, count in trace.nonfinite.items()}


def drop_nonfinite(trace: RefTrace, what: str = "simulation") -> tuple[RefTrace, dict[str, int]]:
    """Remove the rows of ``trace`` that hold a non-finite value in any key.

    Args:
        trace: a trace made by one :class:`~kestrel_ray.DeployedGraph` call.
        what: names the round in the error message (``"initial simulation"``, …).

    Returns:
        ``(clean trace, {node: non-finite rows of that node})``; the trace itself when every
        row is finite (nothing is read then).

    Raises:
        SimulatorError: every row of the trace is non-finite in some node ("node 'x' returned
            a non-finite value in all 64 samples of the initial simulation").
    """
    counts = count_nonfinite(trace)
    if not any(counts.values()) or trace.n == 0:
        return trace, counts
    for node, count in counts.items():
        if count >= trace.n:
            raise SimulatorError(f"node {node!r} returned a non-finite value (NaN or ±inf) in all "
                                 f"{trace.n} samples of the {what}; check its simulator")
    keys = trace.keys()
    blocks = trace.blocks()
    task = _task()
    results = []
    for block, n, _ in blocks:
        refs = task.options(num_returns=len(keys) + 1).remote(keys, *(block[k] for k in keys))
        results.append((list(refs[:-1]), refs[-1], n))
    kept = ray.get([count_ref for _, count_ref, _ in results])
    columns: dict[str, list[tuple[Any, int]]] = {k: [] for k in keys}
    for (refs, _, _), k_rows in zip(results, kept):
        if k_rows == 0:
            continue
        for key, ref in zip(keys, refs):
            columns[key].append((ref, int(k_rows)))
    total = int(sum(kept))
    if total == 0:
        worst = max(counts, key=lambda m: counts[m])
        raise SimulatorError(f"no sample of the {what} is finite in every node ({trace.n} samples; "
                             f"non-finite rows per node: {counts}); check node {worst!r}")
    clean = RefTrace(total, {k: Column.whole(v) for k, v in columns.items()}, dict(trace.meta),
                     {m: 0 for m in counts})
    return clean, counts


def merge_counts(total: Mapping[str, int], new: Mapping[str, int]) -> dict[str, int]:
    """Add per-node counts."""
    out = dict(total)
    for node, count in new.items():
        out[node] = out.get(node, 0) + int(count)
    return out
