"""The checks of imported rows, made in this process before anything is written.

Each problem is one line naming the node and the file it came from:

* every node of the graph has an array (a launch appends whole rows: a value for each node,
  as :meth:`~kestrel_ray.DeployedGraph.ingest` takes them), and none names a node the graph
  does not have;
* the arrays are numeric, with a first axis of rows, and all hold the same number of rows;
* each node's per-sample shape is the one the launch will expect (:func:`~kestrel.preflight.
  _dryrun.expected_keys`: the dry run's, or the observation's for an observed node), and its
  dtype kind too (integers are converted to the simulator's float dtype);
* no value is NaN or ±inf (a row whose simulation failed is dropped before importing);
* the rows of each latent root node whose simulator has a ``log_prob`` (a prior) lie inside its
  support: ``log_prob`` is finite there.

The last two say how many rows fail and the first row's index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel.importing._sources import Source
from kestrel_core import Graph, flat_key
from kestrel_core.internal import Expected, build_simulator

__all__ = ["check_rows"]

#: rows per ``log_prob`` call of the support check (bounds its memory)
_CHUNK = 65536


def check_rows(
    graph: Graph, sources: Mapping[str, Source], expected: Mapping[str, Expected]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Check the rows given for ``graph``.

    Args:
        graph: the run's graph. sources: node → what was read (:mod:`._sources`).
        expected: flat key → the per-sample shape the launch expects (the dry run's).

    Returns:
        ``(arrays, problems)``: node → the rows to store (in forward order, converted where a
        dtype converts), and one line per problem (empty: the rows may be imported).
    """
    problems = [f"node {s.node!r} ({s.label}): {s.problem}" for s in sources.values() if s.problem]
    given = ", ".join(f"{s.node}={s.label}" for s in sources.values()) or "nothing"
    for node in sources:
        if node not in graph.nodes:
            problems.append(
                f"{node}={sources[node].label}: {node!r} is not a node of the graph (its nodes: "
                f"{', '.join(graph.forward_order)})"
            )
    for node in graph.forward_order:
        if node not in sources:
            problems.append(
                f"node {node!r}: no array given (given: {given}); every node of the graph is "
                f"needed, one row per simulation: add {node}=FILE"
            )
    arrays: dict[str, np.ndarray] = {}
    for node in graph.forward_order:
        source = sources.get(node)
        if source is None or source.array is None:
            continue
        array, problem = _checked_array(node, source, expected.get(flat_key(node, "value")))
        if problem:
            problems.append(f"node {node!r} ({source.label}): {problem}")
        else:
            arrays[node] = array
    counts = {node: len(a) for node, a in arrays.items()}
    if len(set(counts.values())) > 1:
        problems.append(
            "the arrays hold different numbers of rows: "
            + ", ".join(f"{m} {c} ({sources[m].label})" for m, c in counts.items())
            + "; every node needs one row per simulation"
        )
    for node, array in arrays.items():
        label = sources[node].label
        bad = _nonfinite_rows(array)
        if bad.any():
            problems.append(
                f"node {node!r} ({label}): {_rows_at(bad, ('holds', 'hold'))} NaN or ±inf; a simulation "
                "that failed cannot be imported: drop those rows from every node's array"
            )
        problem = _support_problem(graph, node, array, ~bad)
        if problem:
            problems.append(f"node {node!r} ({label}): {problem}")
    return arrays, problems


def _checked_array(
    node: str, source: Source, want: Expected | None
) -> tuple[np.ndarray, str | None]:
    """The array as stored (a dtype converted where it converts), or why it cannot be."""
    array = source.array
    assert array is not None
    if array.dtype.kind not in "biufc":
        return array, f"dtype {array.dtype} is not numeric"
    if array.ndim == 0:
        return (
            array,
            "a single value, not rows (expected an array (n, ...), one row per simulation)",
        )
    if want is None:
        return array, None
    shape = tuple(array.shape[1:])
    if shape != tuple(want.shape):
        hint = ""
        if int(np.prod(shape, dtype=np.int64)) == int(np.prod(want.shape, dtype=np.int64)):
            dims = ["n", *map(str, want.shape)]
            hint = f" (reshape it to ({', '.join(dims)}{',' if len(dims) == 1 else ''}))"
        return array, (
            f"rows of shape {shape} (the array is {tuple(array.shape)}); expected "
            f"{tuple(want.shape)} per row, fixed by {want.source}{hint}"
        )
    if want.dtype is not None and array.dtype.kind != np.dtype(want.dtype).kind:
        if not np.can_cast(array.dtype, want.dtype, "same_kind"):
            return array, (
                f"dtype {array.dtype}; the simulator returns {np.dtype(want.dtype)} (its dry "
                "run), and these values do not convert to it"
            )
        array = array.astype(want.dtype)
    return array, None


def _nonfinite_rows(array: np.ndarray) -> np.ndarray:
    """``(n,)``: rows holding a NaN or ±inf."""
    if array.dtype.kind not in "fc" or not len(array):
        return np.zeros(len(array), dtype=bool)
    return ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)


def _rows_at(mask: np.ndarray, verbs: tuple[str, str]) -> str:
    """``"3 rows (the first: row 17) hold"`` (``verbs``: singular, plural)."""
    count, first = int(mask.sum()), int(np.flatnonzero(mask)[0])
    if count == 1:
        return f"1 row (row {first}) {verbs[0]}"
    return f"{count} rows (the first: row {first}) {verbs[1]}"


def _support_problem(graph: Graph, node: str, array: np.ndarray, finite: np.ndarray) -> str | None:
    """Rows of a latent root node with a prior that lie outside its support (finite rows
    only: the others are reported as non-finite)."""
    spec = graph.nodes[node]
    if spec.parents or spec.observed is not None or not finite.any():
        return None
    simulator = build_simulator(spec)
    log_prob: Any = getattr(simulator, "log_prob", None)
    if not callable(log_prob):
        return None
    outside = np.zeros(len(array), dtype=bool)
    for start in range(0, len(array), _CHUNK):
        rows = array[start : start + _CHUNK]
        view = np.asarray(rows).view()
        view.flags.writeable = False
        try:
            lp = np.asarray(log_prob(view), dtype=np.float64).reshape(len(rows), -1).sum(axis=1)
        except Exception as err:  # a user's prior: its error, said as the check's problem
            return (
                f"the log_prob of its prior ({spec.simulator.target_name}) raised on rows "
                f"{start}..{start + len(rows) - 1}: {type(err).__name__}: {err}"
            )
        outside[start : start + len(rows)] = ~np.isfinite(lp)
    outside &= finite
    if not outside.any():
        return None
    first = int(np.flatnonzero(outside)[0])
    value = np.array2string(np.asarray(array[first]), precision=6, threshold=8)
    return (
        f"{_rows_at(outside, ('lies', 'lie'))} outside the support of its prior "
        f"({spec.simulator.target_name}; row {first} is {value}): the run could never have "
        "drawn them; drop them, or widen the prior"
    )
