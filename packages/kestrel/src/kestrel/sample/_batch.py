"""Samples for many observations in one batched call: ``(m, …)`` observations → ``(m, n, …)``.

An observed node's observation has the node's per-sample shape ``D``. An array of shape
``(m, *D)`` with ``m ≥ 2`` holds ``m`` observations of that node (``(1, *D)`` stays one
observation, with the warning of :func:`kestrel_core.check_observation`). Observed nodes given
with shape ``D`` (or not given: the run's own) are shared by all ``m``; every batched node must
hold the same ``m``.

The draws: each observation is repeated once per draw, so that ``m · n`` rows of conditions go
through the graph like ``m · n`` samples of one call (an estimator takes conditions of shape
``(N, *D)``, a row per sample), cut into calls of at most :data:`CALL_ROWS` rows and
:data:`CALL_BYTES` of repeated observations, and the results are reshaped to ``(m, n, *D)``.
:func:`draw_batch` does this on a :class:`~._local.LocalGraph` or a
:class:`~kestrel_ray.DeployedGraph`; ``kestrel sample`` (:func:`~._sampling.sample_run`) writes
the file: ``RUN/samples/<mode>/<digest>/NNNNNN.npz`` (arrays ``(m, n, *D)``) with
``observation.npz`` holding the ``(m, *D)`` observations (their digest names the folder). A
batched file does not become the mode's ``LATEST`` (``kestrel plot`` draws single-observation
files). Each observation is checked as a single one would be (:mod:`._guards`): findings and
warnings name its row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kestrel.rundir._samplefiles import OBSERVED_MODES
from kestrel.sample._guards import capture, issue, merge_rows, renumber, trace_findings
from kestrel.sample._observations import (
    GivenObservations,
    given_observations,
    read_observation,
)
from kestrel_core import (
    ConfigError,
    Graph,
    GraphRunner,
    KestrelError,
    RunConfig,
    ShapeError,
    check_count,
    flat_key,
)
from kestrel_core.internal import inference_plan, resimulation_plan

__all__ = [
    "Batch",
    "CALL_ROWS",
    "CALL_BYTES",
    "read_batch",
    "batch_plan",
    "run_batch",
    "draw_batch",
]

#: rows of conditions per graph call at most
CALL_ROWS = 16384
#: bytes of repeated observations per graph call at most
CALL_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Batch:
    """Observations of a batched sampling call.

    Attributes:
        rows: node → its ``m`` observations ``(m, *D)`` (the batched nodes).
        shared: node → ``x_o`` of shape ``D`` given for all ``m`` (over the run's own).
        m: the number of observations.
    """

    rows: dict[str, np.ndarray]
    shared: dict[str, np.ndarray]
    m: int

    def observations(self, own: Mapping[str, Any]) -> dict[str, Any]:
        """Every observed node's value as filed beside the samples: ``own`` with the shared and
        the batched (``(m, *D)``) observations over it."""
        return {**own, **self.shared, **self.rows}

    def each(self, own: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every observed node's value for each of the ``m`` observations (row ``i`` of the
        batched nodes)."""
        base = {**own, **self.shared}
        return [{**base, **{k: v[i] for k, v in self.rows.items()}} for i in range(self.m)]


def read_batch(config: RunConfig, mode: str, given: GivenObservations) -> Batch | None:
    """The observations given for one sampling call, when they hold several per node.

    Args:
        config: the run's config. mode: the sample mode.
        given: as ``observation`` of :func:`~._sampling.sample_run` (an array or file spec for
            the only observed node, or node → array or spec), or ``None``.

    Returns:
        A :class:`Batch` when some node's array is ``(m, *D)`` with ``m ≥ 2``; ``None``
        otherwise (one observation: :func:`~._observations.given_observations` applies).

    Raises:
        ConfigError: as :func:`~._observations.given_observations` (files, nodes, ``prior``).
        ShapeError: batched nodes of different ``m``; an observation of neither ``D`` nor
            ``(m, *D)``.
    """
    if given is None or mode not in OBSERVED_MODES:
        return None
    own = config.graph.observations
    if not isinstance(given, Mapping):
        if len(own) != 1:
            return None  # given_observations names the error
        given = {next(iter(own)): given}
    arrays = {node: read_observation(spec, node) for node, spec in given.items()}
    batched = {
        node: a
        for node, a in arrays.items()
        if node in own
        and a.shape[1:] == own[node].shape
        and a.ndim > len(own[node].shape)
        and a.shape[0] >= 2
    }
    if not batched:
        return None
    counts = {node: int(a.shape[0]) for node, a in batched.items()}
    if len(set(counts.values())) > 1:
        raise ShapeError(
            f"--observation: the nodes hold different numbers of observations: {counts}"
        )
    shared = given_observations(
        config.graph, mode, {k: v for k, v in arrays.items() if k not in batched}
    )
    rows = {}
    for node, a in batched.items():
        for i in range(a.shape[0]):
            try:
                given_observations(config.graph, mode, {node: a[i]})
            except KestrelError as err:
                raise type(err)(f"{err} (observation {i} of {a.shape[0]})") from None
        rows[node] = np.ascontiguousarray(a)
    return Batch(rows, shared, next(iter(counts.values())))


def batch_plan(graph: Graph, mode: str, observed: Iterable[str]) -> list[tuple[str, str]]:
    """The plan of one sampling mode with ``observed`` nodes given (besides the graph's own).

    Raises:
        ConfigError: a mode without an observation (``prior``) or unknown.
    """
    observed = list(observed)
    if mode == "posterior":
        return inference_plan(graph, "sample_posterior", observed)
    if mode == "proposal":
        return inference_plan(graph, "sample_proposal", observed)
    if mode == "ppd":
        return resimulation_plan(graph, "sample_posterior", graph.latents, observed)
    raise ConfigError(f"batched sampling: mode {mode!r} is not one of {', '.join(OBSERVED_MODES)}")


def run_batch(
    dg: GraphRunner,
    plan: Sequence[tuple[str, str]],
    n: int,
    rows: Mapping[str, np.ndarray],
    keys: Callable[[Any], Sequence[str]] | Sequence[str],
    shared: Mapping[str, Any] | None = None,
    notes: list[Any] | None = None,
) -> dict[str, np.ndarray]:
    """``n`` samples of ``plan`` for each of ``m`` rows of conditions, in batched calls.

    Shape symbols: m rows of conditions, n samples each, D_key a flat key's per-sample shape.

    Args:
        dg: a :class:`~._local.LocalGraph` or a deployed :class:`~kestrel_ray.DeployedGraph`.
        plan: the calls (e.g. :func:`batch_plan`). n: samples per row (≥ 1).
        rows: node → ``(m, *D)``, the conditions of each of the m (same m for every node).
        keys: the flat keys to read, or a function of the first call's trace giving them.
        shared: node → ``D`` conditions shared by every row (over the graph's observations).
        notes: receives what the estimators' observation guards found (their
            ``ObservationWarning`` instances; on Ray the ``observation_checks`` each call
            returns with its trace), each row numbered by its index among the ``m``
            (:func:`~._guards.renumber`); ``None``: the warnings are issued so numbered.

    Returns:
        flat key → ``(m, n, *D_key)``.

    Raises:
        ShapeError: ``rows`` of different m. Node failures as in ``DeployedGraph.run``.
    """
    n = check_count(n, "n")
    counts = {node: int(np.shape(a)[0]) for node, a in rows.items()}
    if len(set(counts.values())) != 1:
        raise ShapeError(f"batched sampling: rows of different lengths {counts}")
    m = next(iter(counts.values()))
    row_bytes = sum(np.asarray(a[:1]).nbytes for a in rows.values())
    window = max(1, min(CALL_ROWS, CALL_BYTES // max(row_bytes, 1)))
    parts: dict[str, list[np.ndarray]] = {}
    names: Sequence[str] | None = None if callable(keys) else list(keys)
    found: list[Any] = []  # the guards' warnings, rows numbered by observation
    total = m * n
    for a in range(0, total, window):
        b = min(total, a + window)
        which = np.arange(a, b) // n
        with capture() as caught:
            trace = dg.run(
                b - a, plan, shared, rows={k: np.asarray(v)[which] for k, v in rows.items()}
            )
        if notes is not None:  # and what the warnings of this process left out (given once)
            caught += trace_findings(trace, [k for k, _ in plan if k in dg.graph.latents], caught)
        runs = _runs(rows, int(which[0]), int(which[-1]))
        found += [renumber(note, runs) for note in caught]
        if names is None:
            names = list(keys(trace))  # type: ignore[operator]  # callable checked above
        arrays = dg.to_arrays(trace, names)
        for key in names:
            parts.setdefault(key, []).append(np.asarray(arrays[key]))
    assert names is not None
    if notes is None:
        issue(merge_rows(found))
    else:
        notes.extend(merge_rows(found))
    out = {}
    for key in names:
        joined = parts[key][0] if len(parts[key]) == 1 else np.concatenate(parts[key])
        out[key] = joined.reshape(m, n, *joined.shape[1:])
    return out


def _runs(rows: Mapping[str, Any], first: int, last: int) -> list[list[int]]:
    """Observations ``first … last`` grouped as the estimators' guards see them in one call:
    consecutive equal observations make one run of identical rows of conditions."""
    out: list[list[int]] = []
    for i in range(first, last + 1):
        if out and all(
            np.asarray(v[i]).tobytes() == np.asarray(v[out[-1][-1]]).tobytes()
            for v in rows.values()
        ):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def draw_batch(
    dg: GraphRunner,
    mode: str,
    n: int,
    batch: Batch,
    nodes: Callable[[Sequence[str]], Sequence[str]],
    notes: list[Any] | None = None,
) -> dict[str, np.ndarray]:
    """``n`` samples of ``mode`` for each observation of ``batch``.

    Args:
        dg: a :class:`~._local.LocalGraph` or a deployed :class:`~kestrel_ray.DeployedGraph`
            (weights loaded). mode: ``posterior``, ``proposal`` or ``ppd``. n: samples per
            observation. batch: the observations.
        nodes: the nodes to return, given the nodes the call produced (``kestrel sample``:
            :func:`~._sampling.select_nodes`).
        notes: as for :func:`run_batch`.

    Returns:
        node → ``(m, n, *D)``.
    """
    plan = batch_plan(dg.graph, mode, [*batch.rows, *batch.shared])

    def keys(trace: Any) -> list[str]:
        return [flat_key(m, "value") for m in nodes(trace.nodes())]

    arrays = run_batch(dg, plan, n, batch.rows, keys, batch.shared, notes)
    return {key.rsplit(".", 1)[0]: a for key, a in arrays.items()}
