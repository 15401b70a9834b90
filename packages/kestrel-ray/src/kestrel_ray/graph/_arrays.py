"""The driver's two doors to data: arrays in (:func:`put_rows`), arrays out (:func:`read_arrays`).

Everywhere else the driver handles ObjectRefs only. Data a user hands to the driver — an
observation, samples from disk — enters the object store through :func:`put_rows` (the driver
owns the object), normalised on the way by kestrel-core's one rule for run-time inputs
(:func:`kestrel_core.graph._inputs.as_input`: numeric dtype, native byte order, C-contiguous — so a
big-endian, reversed or strided observation is the same array as one read from a file); a node
actor then reads it like any other block, and given samples pass the same boundary checks as a
simulator's output there. Data leaves only through
:func:`read_arrays`, one batched ``ray.get`` for a whole trace, when a caller asks for arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray

from kestrel_core import ConfigError, Graph, GraphError, KestrelError, OutputTypeError, ShapeError
from kestrel_core.internal import as_input, fit_given_observation
from kestrel_ray.graph._refs import Column, RefTrace

__all__ = ["put_rows", "observation_columns", "given_columns", "read_arrays"]


def put_rows(rows: Any, what: str = "rows", error: type[KestrelError] = OutputTypeError) -> Column:
    """Put an array of rows into the object store as one block; the driver owns it.

    Args:
        rows: array-like ``(N, *D)``, N ≥ 1, any byte order and strides (normalised by
            :func:`~kestrel_core.graph._inputs.as_input`: native byte order, C-contiguous, numeric).
        what: what the rows are, for messages. error: raised for non-numeric rows.

    Returns:
        A :class:`Column` of the N rows (one whole block).

    Raises:
        KestrelError: (of class ``error``) the rows are not numeric.
    """
    array = as_input(rows, what, copy=False, error=error)
    return Column.whole([(ray.put(array), int(array.shape[0]))])


def observation_columns(graph: Graph, observations: Mapping[str, Any]) -> dict[str, Column]:
    """Observations as one-row (broadcast) columns: the one way an observation enters.

    Args:
        graph: the graph the observations belong to.
        observations: node → value without batch axis, shape ``D`` of the node.

    Returns:
        node → :class:`Column` of one row, shape ``(1, *D)``.

    Raises:
        GraphError: an observation names a node the graph does not have.
        ConfigError: an observation is not real numeric (complex, masked, object), or holds
            NaN or ±inf (node, index, value).
        ShapeError: an observation of another shape than the graph's own for that node (one
            of shape ``(1, *D)`` is used as ``D``, with a warning).
    """
    out = {}
    for name, value in observations.items():
        if name not in graph:
            raise GraphError(f"observation for unknown node {name!r}; nodes: {list(graph.nodes)}")
        array = fit_given_observation(
            graph, name, as_input(value, "observation", copy=False, node=name)
        )
        out[name] = put_rows(array[None], f"observation {name!r}", ConfigError)
    return out


def given_columns(graph: Graph, values: Mapping[str, Any]) -> tuple[int, dict[str, Column]]:
    """Given samples of every node (e.g. read from disk) as columns: the one way samples enter.

    Args:
        graph: the graph.
        values: node → array ``(N, *D)``, for every node of the graph.

    Returns:
        ``(N, {node: Column of N rows})`` (no columns when N is 0).

    Raises:
        GraphError: a node has no values, or values name a node the graph does not have.
        ShapeError: the nodes' arrays disagree on N (or one has no leading axis).
        OutputTypeError: a node's values are not numeric (names the node).
    """
    order = graph.forward_order
    unknown = [m for m in values if m not in graph]
    if unknown:
        raise GraphError(f"values for unknown node {unknown[0]!r}; nodes: {order}")
    missing = [m for m in order if m not in values]
    if missing:
        raise GraphError(f"no values for node {missing[0]!r} (given: {sorted(values)})")
    counts = {m: int(np.shape(values[m])[0]) if np.ndim(values[m]) else -1 for m in order}
    n = counts[order[0]]
    if any(c != n for c in counts.values()) or n < 0:
        raise ShapeError(f"the nodes' values hold different numbers of samples: {counts}")
    if not n:
        return n, {}
    return n, {m: put_rows(values[m], f"node {m!r}: given values") for m in order}


def read_arrays(trace: RefTrace, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Read a trace's columns into arrays (one batched ``ray.get`` for every block).

    Shape symbols: N samples of the trace, D_key the per-sample shape of a flat key.

    Args:
        trace: the trace.
        keys: flat keys to read (default: all of them).

    Returns:
        flat key → array ``(N, *D_key)``; may be a read-only view of a stored block.

    Raises:
        KeyError: a key is not in the trace.
    """
    keys = trace.keys() if keys is None else list(keys)
    index: dict[Any, int] = {}
    for key in keys:
        for ref in trace[key].refs:
            index.setdefault(ref, len(index))
    blocks = ray.get(list(index)) if index else []
    out = {}
    for key in keys:
        parts = [blocks[index[ref]][a:b] for ref, a, b in trace[key].segments]
        if not parts:
            shape, dtype = trace.meta.get(key, ((), "float64"))
            out[key] = np.empty((0, *shape), dtype)
        else:
            out[key] = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out
