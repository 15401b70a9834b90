"""``LocalGraph``: a run's graph sampled in this process — no Ray, no actors.

``kestrel sample`` draws from a trained run in one process whenever one process can do it
(see :func:`~kestrel.sample._sampling.needs_ray`): the simulators are built from their
``_target_`` here, and each estimator node's estimator is built the way its node actor builds
it (``node.estimator.build()`` — the config's ``_target_``, so this module never imports torch
itself), set up with the same :class:`~kestrel_core.EstimatorContext`, and loaded from
``<graph>/<node>/estimator.pt`` with ``load_bytes``.

The calls mirror :class:`~kestrel_ray.DeployedGraph`'s (both are a
:class:`kestrel_core.GraphRunner`): the same plans
(:mod:`kestrel_core.execute._plan`), the same chunk grid (:func:`~kestrel_ray.chunk_grid`) and the same
random streams — the run's ``SeedSequence`` spawns one child per node in forward order, every
planned call spawns one grandchild per chunk from its node's child, and an estimator draws from
its chunk's generator (``rng``, as on its node actor: the sampling call's seed, not the
estimator's). So a seed gives the same draws here as on Ray, up to the last bits of
floating-point arithmetic (thread counts).

Shape symbols: N samples of a call, D a node's per-sample shape.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kestrel_core import (
    Estimator,
    EstimatorContext,
    EstimatorError,
    Graph,
    GraphRunner,
    ShapeError,
    as_record,
    check_count,
    flat_key,
    seed_sequence,
)
from kestrel_core.internal import (
    ESTIMATOR_FILE,
    as_input,
    build_simulator,
    call_conditions,
    call_estimator,
    fit_given_observation,
    forward_plan,
    inference_plan,
    observation_checks,
    read_estimator_file,
    resimulation_plan,
    simulate_or_skip,
    skipped_values,
)
from kestrel_ray import chunk_grid
from kestrel_ray.internal import rows_of, spans

__all__ = ["LocalGraph", "LocalTrace"]


class LocalTrace:
    """The arrays of one :class:`LocalGraph` call (the in-process ``RefTrace``).

    Attributes:
        n: number of samples. arrays: flat key → array ``(N, *D)`` (``"<node>.value"``, and
        ``"<node>.log_prob"`` ``(N,)`` where the call gives one), nodes in call order.
        errors, error, raised: as :class:`~kestrel_ray.RefTrace`'s (``on_error: skip``): node →
        samples whose simulation raised, the first exception's texts, bool ``(N,)`` mask.
        findings: estimator node → what its observation guards found at these draws (as
        :class:`~kestrel_ray.RefTrace`'s).
    """

    def __init__(self, n: int, arrays: dict[str, np.ndarray] | None = None):
        self.n = n
        self.arrays = arrays or {}
        self.errors: dict[str, int] = {}
        self.error: dict[str, tuple[str, str]] = {}
        self.raised: dict[str, np.ndarray] = {}
        self.findings: dict[str, list[dict[str, Any]]] = {}

    def nodes(self) -> list[str]:
        """Node names present, in call order."""
        return list(dict.fromkeys(k.split(".", 1)[0] for k in self.arrays))


class LocalGraph:
    """A graph's simulators (and estimators) in this process, sampled like a deployed graph.

    Args:
        graph: a validated :class:`kestrel_core.Graph`.
        seed: run seed (int ≥ 0) or ``None`` for fresh entropy (``self.seed`` records it).
        estimators: build the latent nodes' estimators (``False``: forward sampling only, which
            imports nothing of the estimators' packages).

    Raises:
        ConfigError, SimulatorError: a simulator cannot be built. EstimatorError: an estimator
            cannot be built or set up (naming the node and its ``_target_``).
    """

    def __init__(self, graph: Graph, seed: int | None = None, *, estimators: bool = True):
        graph.validate()
        self.graph = graph
        root = seed_sequence(seed)
        self.seed = root.entropy
        order = graph.forward_order
        self._seqs = dict(zip(order, root.spawn(len(order))))
        self._simulators = {name: build_simulator(graph.nodes[name]) for name in order}
        self._estimators: dict[str, Estimator] = {}
        if estimators:
            for name in graph.latents:
                self._estimators[name] = self._build_estimator(name)

    def _actor_seq(self, name: str) -> np.random.SeedSequence:
        """The sequence a node's (first) actor is seeded with (see ``start_node_actors``)."""
        base = self._seqs[name].generate_state(2)
        return np.random.SeedSequence([*base.tolist(), 0])

    def _build_estimator(self, name: str) -> Estimator:
        node = self.graph.nodes[name]
        spec = node.estimator
        if spec is None:  # graph.latents are the nodes with an estimator
            raise EstimatorError(f"node {name!r} has no estimator")
        try:
            estimator = spec.build()
            estimator.setup(
                EstimatorContext(
                    node=name,
                    prior=self._simulators[name],
                    evidence=tuple(node.evidence),
                    scaffolds=tuple(node.scaffolds),
                    seed=int(self._actor_seq(name).generate_state(1)[0]),
                )
            )
        except Exception as err:
            raise EstimatorError(
                f"node {name!r}: building estimator {spec.target_name} failed: "
                f"{type(err).__name__}: {err}"
            ) from err
        return estimator

    # -- estimator files ---------------------------------------------------------------------
    def load(self, directory: str | os.PathLike[str], nodes: Iterable[str] | None = None) -> None:
        """Load estimators from ``<directory>/<node>/estimator.pt`` (``load_bytes``).

        Args:
            directory: the run's graph folder. nodes: estimator nodes (default: every one).

        Raises:
            EstimatorError: a node has no estimator here, or its file cannot be read.
            KestrelError: the estimator refused the file (its own error, naming the file).
        """
        for name in self._estimators if nodes is None else nodes:
            if name not in self._estimators:
                raise EstimatorError(f"load: node {name!r} has no estimator built here")
            path = os.path.join(os.fspath(directory), name, ESTIMATOR_FILE)
            data = read_estimator_file(name, path)
            self._estimators[name].load_bytes(data, source=f"checkpoint {path!r}")

    # -- sampling (as DeployedGraph) ---------------------------------------------------------
    def sample(self, n: int) -> LocalTrace:
        """Forward-simulate every node (latent roots from their priors)."""
        return self.run(n, forward_plan(self.graph))

    def sample_posterior(self, n: int, observations: Mapping[str, Any] | None = None) -> LocalTrace:
        """Posterior draws of the latent nodes given the observations (over the graph's own)."""
        plan = inference_plan(self.graph, "sample_posterior", observations or ())
        return self.run(n, plan, observations)

    def sample_proposal(self, n: int, observations: Mapping[str, Any] | None = None) -> LocalTrace:
        """Proposal draws of the latent nodes given the observations."""
        plan = inference_plan(self.graph, "sample_proposal", observations or ())
        return self.run(n, plan, observations)

    def sample_ppd(self, n: int, observations: Mapping[str, Any] | None = None) -> LocalTrace:
        """Latents from the posterior, every other node simulated from them."""
        latents = list(self._estimators)
        plan = resimulation_plan(self.graph, "sample_posterior", latents, observations or ())
        return self.run(n, plan, observations)

    def to_arrays(self, trace: LocalTrace, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """Flat key → array of the trace (as :meth:`DeployedGraph.to_arrays`)."""
        return {k: trace.arrays[k] for k in keys}

    def status(self, timeout: float = 2.0) -> dict[str, Any]:
        """Node statuses as :meth:`DeployedGraph.status` gives them (without the store's
        counts): node → ``{"node": name}``, with ``"estimator"``: the estimator's ``status()``
        where one is built here.

        Args:
            timeout: unused (nothing to wait for in this process); as on Ray.

        Raises:
            Exception: an estimator's ``status()`` failed (its own exception).
        """
        out: dict[str, Any] = {}
        for name in self.graph.forward_order:
            out[name] = {"node": name}
            if name in self._estimators:
                out[name]["estimator"] = dict(self._estimators[name].status())
        return out

    def estimator(self, name: str) -> Estimator:
        """The estimator of node ``name`` (built here; loaded by :meth:`load`).

        Raises:
            EstimatorError: the node has no estimator here.
        """
        if name not in self._estimators:
            raise EstimatorError(f"node {name!r} has no estimator built here")
        return self._estimators[name]

    def run(
        self,
        n: int,
        plan: Sequence[tuple[str, str]],
        observations: Mapping[str, Any] | None = None,
        *,
        rows: Mapping[str, Any] | None = None,
    ) -> LocalTrace:
        """Call ``(node, method)`` in order, each conditioned on the values known so far.

        Args:
            n: number of samples. plan: the calls. observations: node → ``x_o`` (shape ``D``)
                over the graph's own. rows: node → array ``(n, *D)``, a value per sample (e.g.
                m observations, each repeated for its draws), over ``observations``.

        Returns:
            :class:`LocalTrace` of the planned nodes (empty for ``n = 0``).

        Raises:
            CountError: bad ``n``. GraphError: a needed condition has no value.
            ConfigError: an observation holds NaN or ±inf (node, index, value).
            ShapeError: ``rows`` of another length than ``n``.
            EstimatorError: an estimator method for a node without estimator here.
            KestrelError: a simulator or estimator failed (naming the node).
        """
        n = check_count(n)
        if n == 0:
            return LocalTrace(0)
        known: dict[str, np.ndarray] = {}
        for name, value in {**self.graph.observations, **(observations or {})}.items():
            array = as_input(value, "observation", node=name)
            known[name] = fit_given_observation(self.graph, name, array)[None]  # one row, as on Ray
        for name, value in (rows or {}).items():
            known[name] = as_input(value, f"rows of {name!r}", copy=False)
            if known[name].shape[:1] != (n,):
                raise ShapeError(f"rows of {name!r}: {known[name].shape[:1]} rows for {n} samples")
        nodes = self.graph.nodes
        names = list(dict.fromkeys(name for name, _ in plan))
        chunks = chunk_grid(n, [(nodes[m].sample_chunk_size, nodes[m].num_actors) for m in names])
        records: dict[str, dict[str, np.ndarray]] = {}
        out = LocalTrace(n)
        for name, method in plan:
            latent = name in self._estimators
            conds = call_conditions(self.graph, name, method, latent=latent, known=known)
            seeds = self._seqs[name].spawn(len(chunks))  # as DeployedGraph: one per chunk
            if method == "sample" or not latent:
                record = self._simulate(name, conds, n, chunks, seeds, out)
            else:
                record = self._estimate(name, method, conds, n, chunks, seeds)
                found = observation_checks(self._estimators[name])  # as on its node actor
                out.findings.pop(name, None)
                if found:
                    out.findings[name] = found
            records.pop(name, None)
            records[name] = record
            known[name] = record["value"]
        out.arrays = {flat_key(m, f): v for m, rec in records.items() for f, v in rec.items()}
        return out

    def _simulate(
        self,
        name: str,
        conds: Mapping[str, np.ndarray],
        n: int,
        chunks: Sequence[int],
        seeds: Sequence[Any],
        trace: LocalTrace,
    ) -> dict[str, np.ndarray]:
        """As a node actor simulates (``on_error: skip`` included; counted in ``trace``)."""
        simulator = self._simulators[name]
        log_prob = getattr(simulator, "log_prob", None)
        attempts = []
        for (a, c), seq in zip(spans(chunks), seeds):
            seq = seed_sequence(seq)
            rng = np.random.Generator(np.random.PCG64(seq))
            parents = {p: rows_of(conds[p], a, c, n) for p in self.graph.nodes[name].parents}
            on_error = self.graph.nodes[name].on_error
            attempts.append(
                simulate_or_skip(name, simulator, c, parents, rng=rng, seq=seq, on_error=on_error)
            )
        values, first = skipped_values(name, attempts)
        if first is not None:
            trace.raised[name] = np.concatenate([t.raised for t in attempts])
            trace.errors[name], trace.error[name] = int(trace.raised[name].sum()), first
        log_probs: list[np.ndarray] = []
        for value in values if callable(log_prob) else ():
            view = value.view()
            view.flags.writeable = False
            got = {"log_prob": log_prob(view)}  # type: ignore[misc]  # callable
            out = as_record(name, "log_prob", got, len(value), fields=("log_prob",))
            log_probs.append(out["log_prob"])
        record = {"value": _join(values)}
        if log_probs:
            record["log_prob"] = _join(log_probs)
        return record

    def _estimate(
        self,
        name: str,
        method: str,
        conds: Mapping[str, np.ndarray],
        n: int,
        chunks: Sequence[int],
        seeds: Sequence[Any],
    ) -> dict[str, np.ndarray]:
        estimator = self._estimators[name]
        parts: list[dict[str, np.ndarray]] = []
        for (a, c), seq in zip(spans(chunks), seeds):
            rows = {k: rows_of(v, a, c, n) for k, v in conds.items()}
            out = call_estimator(estimator, method, c, rows, seq)  # draws from the call's seed
            parts.append(as_record(name, method, out, c))
        return {f: _join([p[f] for p in parts]) for f in parts[0]}


if TYPE_CHECKING:  # mypy proves that a LocalGraph is a kestrel_core.GraphRunner

    def _is_graph_runner(graph: LocalGraph) -> GraphRunner:
        return graph


def _join(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
