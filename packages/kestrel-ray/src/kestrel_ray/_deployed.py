"""``DeployedGraph``: a graph running on Ray actors, driven with ObjectRefs only.

The driver never reads simulated data: it submits every node's call at once (a downstream
actor awaits its parents' refs itself), reads back only the small meta dict of each call
(per-sample shapes, dtypes, non-finite counts, or the error of a failed node), and hands block
refs to the store. Arrays come back only from :meth:`DeployedGraph.to_arrays`, when asked.

Randomness follows kestrel-core's scheme: the run's ``SeedSequence`` spawns one child per node
in forward order, and each call spawns one grandchild per chunk of that node's child — on the
driver, so the streams do not depend on how many replicas serve a node or which one runs a
chunk. All nodes of one call share one chunk grid (:func:`~kestrel_ray.chunk_grid`), so every
chunk of a trace can be stored as one block.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray
from kestrel_core import (
    ConfigError,
    EstimatorError,
    Graph,
    GraphError,
    KestrelError,
    StoreWarning,
    check_count,
    flat_key,
    seed_sequence,
)
from ray import cloudpickle

from ._handles import NodeHandle, Pending
from ._multiplex import MultiplexNodeWrapper
from ._refs import Column, RefTrace, chunk_grid, merge_meta
from ._resources import actor_options, check_resources, unwrap_error
from ._store import SampleStore, appended
from ._wrapper import NodeWrapper

__all__ = ["DeployedGraph"]


class DeployedGraph:
    """One actor per node (``num_actors`` replicas when > 1) plus a sample store.

    Shape symbols: N samples of a call, D_key the per-sample shape of a flat key.

    Args:
        graph: a validated :class:`kestrel_core.Graph`.
        seed: run seed (int ≥ 0) or ``None`` for fresh entropy (``self.seed`` records it).
        store: an existing :class:`~kestrel_ray.SampleStore` actor to append to (not killed by
            :meth:`shutdown`), or ``None`` to start one at :meth:`deploy`.
        run_dir: run directory: estimators save under ``<run_dir>/graph/<node>``, snapshots go to
            ``<run_dir>/buffer/snapshots``.
        buffer: a :class:`kestrel_core.BufferConfig` (or mapping) for the store started here;
            ``None`` keeps every sample (no eviction, no validation split).
        ready_timeout: seconds to wait for the actors to start.
        estimators: build the latent nodes' estimators; ``False`` deploys simulators only (forward
            sampling without the estimators' dependencies, e.g. torch).

    Example:
        ``with DeployedGraph(graph, seed=0) as dg: arrays = dg.to_arrays(dg.sample(1024))``
    """

    #: the actor class of the nodes (``ray.remote`` is applied at deploy; tests swap it)
    wrapper_cls: type = NodeWrapper

    def __init__(self, graph: Graph, *, seed: int | None = None, store: Any = None,
                 run_dir: str | None = None, buffer: Any = None, ready_timeout: float = 60.0,
                 estimators: bool = True):
        self.graph = graph
        self._estimators = bool(estimators)
        self._root = seed_sequence(seed)
        self.seed = self._root.entropy
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self._buffer = buffer
        self._store = store
        self._own_store = store is None
        self._ready_timeout = float(ready_timeout)
        order = graph.forward_order
        self._seqs = dict(zip(order, self._root.spawn(len(order))))
        self._handles: dict[str, NodeHandle | MultiplexNodeWrapper] = {}
        self._obs_columns: dict[str, Column] = {}

    @classmethod
    def from_config(cls, config: Any, *, seed: int | None = None, store: Any = None) -> DeployedGraph:
        """Build from a :class:`kestrel_core.RunConfig` (graph, buffer, run directory)."""
        return cls(config.graph, seed=seed, store=store, run_dir=config.run_dir, buffer=config.buffer)

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> DeployedGraph:
        return self.deploy()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    @property
    def deployed(self) -> bool:
        """Whether the actors are running."""
        return bool(self._handles)

    @property
    def store(self) -> Any:
        """The store actor handle (``None`` before :meth:`deploy` when none was given)."""
        return self._store

    @property
    def actors(self) -> list[Any]:
        """Every node actor this graph started (replicas included), plus its own store."""
        out = [a for h in self._handles.values() for a in h.actors]
        if self._own_store and self._store is not None:
            out.append(self._store)
        return out

    def deploy(self) -> DeployedGraph:
        """Check resources, start the store and one actor per node (replica), wait until ready.

        Returns:
            ``self``.

        Raises:
            GraphError: the graph is invalid.
            ConfigError: an estimator node has ``num_actors > 1``, or a resource request can never
                be met ("node 'x' requests 2 GPUs; the cluster has 0") — before any actor starts.
            SimulatorError, EstimatorError: a node's simulator or estimator failed to build (the
                node's name and the original exception text), or an actor did not start within
                ``ready_timeout``.
        """
        if self.deployed:
            return self
        self.graph.validate()
        nodes = self.graph.nodes
        for name, node in nodes.items():
            if node.estimator is not None and node.num_actors > 1:
                raise ConfigError(f"graph.{name}.num_actors: node {name!r} has an estimator and "
                                  f"num_actors={node.num_actors}; estimator nodes cannot be "
                                  "multiplexed (set num_actors: 1)")
        check_resources([(name, node.num_actors, actor_options(node)) for name, node in nodes.items()])
        paths = _import_paths()
        pending: list[tuple[str, int, Any]] = []
        try:
            if self._store is None:
                self._store = self._start_store()
            cls = ray.remote(self.wrapper_cls)
            for name, node in nodes.items():
                blob = cloudpickle.dumps(node if self._estimators else replace(node, estimator=None))
                base = self._seqs[name].generate_state(2)
                for i in range(node.num_actors):
                    actor = cls.options(**actor_options(node)).remote(
                        blob, seed=np.random.SeedSequence([*base.tolist(), i]), import_paths=paths,
                        replica=i)
                    pending.append((name, i, actor))
            infos = self._wait_ready(pending)
        except BaseException:
            for _, _, actor in pending:
                ray.kill(actor)
            if self._own_store and self._store is not None:
                ray.kill(self._store)
                self._store = None
            raise
        for name, node in nodes.items():
            reps = [NodeHandle(name, actor, infos[(name, i)]["fields"])
                    for (m, i, actor) in pending if m == name]
            self._handles[name] = reps[0] if len(reps) == 1 else MultiplexNodeWrapper(name, reps)
        self._obs_columns = self._put_observations(self.graph.observations)
        return self

    def _start_store(self) -> Any:
        buf = self._buffer
        get = (buf.get if isinstance(buf, Mapping) else (lambda k, d=None: getattr(buf, k, d)))
        kwargs: dict[str, Any] = {}
        if buf is not None:
            kwargs = dict(min_samples=get("min_samples", 0), max_samples=get("max_samples", 2**62),
                          validation_samples=get("validation_samples", 0))
            every = int(get("snapshot_every", 0) or 0)
            if every:
                if self.run_dir is None:
                    raise ConfigError("buffer.snapshot_every: snapshots need a run directory")
                kwargs.update(snapshot_every=every,
                              snapshot_dir=os.path.join(self.run_dir, "buffer", "snapshots"))
        kwargs["seed"] = int(self._root.generate_state(1)[0])
        SampleStore(**kwargs)  # validates here, where the error is readable
        return ray.remote(SampleStore).options(num_cpus=0).remote(**kwargs)

    def _wait_ready(self, pending: Sequence[tuple[str, int, Any]]) -> dict[tuple[str, int], dict]:
        ready_refs = {actor.ready.remote(): (name, i) for name, i, actor in pending}
        deadline = time.monotonic() + self._ready_timeout
        infos: dict[tuple[str, int], dict] = {}
        left_refs = list(ready_refs)
        while left_refs:
            done_refs, left_refs = ray.wait(left_refs, num_returns=1,
                                            timeout=max(0.0, deadline - time.monotonic()))
            if not done_refs:
                names = sorted({ready_refs[r][0] for r in left_refs})
                raise KestrelError(f"node actor(s) {names} did not start within "
                                   f"{self._ready_timeout:g} s (resources taken by other work?)")
            name, i = ready_refs[done_refs[0]]
            try:
                infos[(name, i)] = ray.get(done_refs[0])
            except ray.exceptions.RayError as err:
                raise unwrap_error(err, name, "start") from err
        return infos

    def shutdown(self, wait: float = 10.0) -> None:
        """Kill every actor this graph started (not a store passed in). Idempotent.

        Args:
            wait: seconds to wait until Ray reports every killed actor dead (``ray.kill`` is
                asynchronous; 0 returns at once).
        """
        actors = self.actors
        for actor in actors:
            ray.kill(actor)
        if wait > 0:
            _await_dead(actors, wait)
        self._handles = {}
        self._obs_columns = {}
        if self._own_store:
            self._store = None

    @property
    def _latents(self) -> list[str]:
        return self.graph.latents if self._estimators else []

    def handle(self, name: str) -> NodeHandle | MultiplexNodeWrapper:
        """The driver-side handle of node ``name`` (to submit calls with explicit conditions).

        Raises:
            KestrelError: not deployed. GraphError: unknown node.
        """
        self._check_deployed()
        self.graph[name]
        return self._handles[name]

    def _check_deployed(self) -> None:
        if not self.deployed:
            raise KestrelError("DeployedGraph is not deployed; call deploy() (or use it in a `with`)")

    # -- sampling ------------------------------------------------------------------------------
    def sample(self, n: int) -> RefTrace:
        """Forward-simulate every node in forward order (latent roots from their priors).

        Returns:
            :class:`RefTrace` of N samples with every node's keys.

        Raises:
            CountError: ``n`` is not a non-negative integer. Node failures as in :meth:`run`.
        """
        return self.run(n, [(name, "sample") for name in self.graph.forward_order])

    def sample_posterior(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Posterior draws of the latent nodes (inference order) given the observations.

        Args:
            n: number of samples.
            observations: ``{node: x_o}`` without batch axis, over the graph's own observations.
        """
        return self.run(n, self._inference_plan("sample_posterior", observations), observations)

    def sample_proposal(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Proposal draws of the latent nodes (inference order) given the observations."""
        return self.run(n, self._inference_plan("sample_proposal", observations), observations)

    def sample_ppd(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Posterior predictive: latents from the posterior, every other node simulated from them."""
        return self._resimulate("sample_posterior", n, observations)

    def simulate_from_proposal(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """The joint trace a resimulation round appends: latents (``value`` and ``log_prob``)
        from the proposal, every other node forward-simulated from them."""
        return self._resimulate("sample_proposal", n, observations)

    def _inference_plan(self, method: str, observations: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        observed = set(self.graph.observations) | set(observations or {})
        return [(name, method) for name in self.graph.inference_order if name not in observed]

    def _resimulate(self, method: str, n: int, observations: Mapping[str, Any] | None) -> RefTrace:
        latents = set(self._latents)
        plan = self._inference_plan(method, observations)
        plan += [(name, "sample") for name in self.graph.forward_order if name not in latents]
        return self.run(n, plan, observations)

    def run(self, n: int, plan: Sequence[tuple[str, str]],
            observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Submit ``(node, method)`` calls in order, then wait for their meta dicts.

        A node's conditions are the latest values of its parents (``sample``, and nodes without
        estimator) or of its evidence plus any available scaffolds (estimator methods); observed
        nodes provide one broadcast ref each. A node planned twice keeps its last result.

        Returns:
            :class:`RefTrace` of the planned nodes' keys (no keys when ``n`` is 0).

        Raises:
            CountError: bad ``n``. GraphError: a needed condition has no value.
            EstimatorError: an inference method is planned for a node with evidence but no
                estimator (or one deployed with ``estimators=False``).
            KestrelError: a node failed (its own error, naming the node; user exceptions carry a
                note naming the node).
        """
        self._check_deployed()
        n = check_count(n)
        if n == 0:
            return RefTrace(0)  # like sample_forward: no keys, no simulator called
        nodes = self.graph.nodes
        names = list(dict.fromkeys(name for name, _ in plan))
        chunks = chunk_grid(n, [(nodes[m].sample_chunk_size, nodes[m].num_actors) for m in names])
        avail: dict[str, Column] = dict(self._obs_columns)
        if observations:
            avail.update(self._put_observations(observations))
        results: dict[str, tuple[str, Pending]] = {}
        latents = set(self._latents)
        for name, method in plan:
            node = nodes[name]
            estimating = method != "sample" and name in latents
            if method != "sample" and node.evidence and not estimating:
                raise EstimatorError(f"node {name!r} has evidence but no estimator deployed; "
                                     f"{method} cannot draw it")
            need = node.evidence if estimating else node.parents
            lacking = [c for c in need if c not in avail]
            if lacking:
                raise GraphError(f"node {name!r}: {method} needs {lacking[0]!r}, which has no value "
                                 f"here (observed: {sorted(self._obs_columns)})")
            conds = {c: avail[c] for c in need}
            if estimating:
                conds.update({c: avail[c] for c in node.scaffolds if c in avail})
            seeds = self._seqs[name].spawn(len(chunks))
            pending = self._handles[name].submit(method, n, conds, chunks, seeds)
            results.pop(name, None)
            results[name] = (method, pending)
            avail[name] = pending.columns["value"]
        trace = RefTrace(n)
        for name, (method, pending) in results.items():
            try:
                metas = ray.get(pending.meta_refs)
            except ray.exceptions.RayError as err:
                raise unwrap_error(err, name, f"{method}({n})") from err
            fields = merge_meta([m["fields"] for m in metas], name)
            for fld, col in pending.columns.items():
                key = flat_key(name, fld)
                trace.columns[key] = col
                if fld in fields:
                    trace.meta[key] = fields[fld]
            trace.nonfinite[name] = sum(int(m["nonfinite"]) for m in metas)
        return trace

    def _put_observations(self, observations: Mapping[str, Any]) -> dict[str, Column]:
        out = {}
        for name, obs in observations.items():
            if name not in self.graph:
                raise GraphError(f"observation for unknown node {name!r}; nodes: {list(self.graph.nodes)}")
            out[name] = Column.whole([(ray.put(np.asarray(obs)[None]), 1)])  # driver-owned
        return out

    # -- store and arrays ----------------------------------------------------------------------
    def append(self, trace: RefTrace, *, wait: bool = True) -> Any:
        """Append a trace to the store, one block per chunk (no data passes the driver).

        Args:
            trace: a trace from one call of this graph (its keys share block boundaries).
            wait: return the new ids (int64 ``(N,)``); ``False`` returns at once the ObjectRef of
                ``(ids, warning texts)``.

        Warns:
            StoreWarning: more samples at once than the buffer holds.

        Raises:
            StoreError: the keys or per-sample shapes break the store's schema (K06), or the
                trace's keys do not share blocks.
        """
        self._check_deployed()
        ref = self._store.append_blocks.remote(trace.blocks())
        if not wait:
            return ref
        ids, notes = appended(ref)
        for note in notes:
            warnings.warn(note, StoreWarning, stacklevel=2)
        return ids

    def to_arrays(self, trace: RefTrace, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Read a trace into arrays (one batched get).

        Returns:
            flat key → array ``(N, *D_key)``; may be a read-only view of a stored block.
        """
        keys = trace.keys() if keys is None else list(keys)
        unique_refs: dict[Any, int] = {}
        for key in keys:
            for ref in trace[key].refs:
                unique_refs.setdefault(ref, len(unique_refs))
        values = ray.get(list(unique_refs)) if unique_refs else []
        out = {}
        for key in keys:
            col = trace[key]
            parts = [values[unique_refs[ref]][a:b] for ref, a, b in col.segments]
            if not parts:
                shape, dtype = trace.meta.get(key, ((), "float64"))
                out[key] = np.empty((0, *shape), dtype)
            else:
                out[key] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return out

    # -- training and state --------------------------------------------------------------------
    def start_training(self) -> dict[str, Any]:
        """Start ``train(store)`` on every estimator node; returns ``{node: ObjectRef}``."""
        self._check_deployed()
        return {name: self._handles[name].actor.train.remote(self._store) for name in self._latents}

    def request_stop(self) -> None:
        """Ask every estimator to stop after its current step (fire and forget)."""
        for name in self._latents:
            self._handles[name].actor.request_stop.remote()

    def status(self, timeout: float = 2.0) -> dict[str, Any]:
        """Node statuses (a list per multiplexed node) and the store's counts.

        Raises:
            GetTimeoutError: an actor did not answer within ``timeout``.
        """
        self._check_deployed()
        refs = {name: [a.status.remote() for a in h.actors] for name, h in self._handles.items()}
        out: dict[str, Any] = {name: ray.get(r, timeout=timeout) for name, r in refs.items()}
        out = {name: v[0] if len(v) == 1 else v for name, v in out.items()}
        out["_store"] = ray.get(self._store.stats.remote(), timeout=timeout)
        return out

    def save(self, directory: str | None = None) -> None:
        """Save every estimator to ``<directory>/<node>`` (default ``<run_dir>/graph``)."""
        self._each_estimator("save", directory)

    def load(self, directory: str | None = None) -> None:
        """Load every estimator from ``<directory>/<node>`` (default ``<run_dir>/graph``)."""
        self._each_estimator("load", directory)

    def _each_estimator(self, method: str, directory: str | None) -> None:
        self._check_deployed()
        if directory is None:
            if self.run_dir is None:
                raise ConfigError(f"{method}: give a directory or a run_dir")
            directory = os.path.join(self.run_dir, "graph")
        refs = {name: getattr(self._handles[name].actor, method).remote(os.path.join(directory, name))
                for name in self._latents}
        for name, ref in refs.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayError as err:
                raise unwrap_error(err, name, method) from err


def _await_dead(actors: Sequence[Any], timeout: float) -> None:
    """Poll ``ready`` until every actor answers with :class:`ray.exceptions.RayActorError`."""
    deadline = time.monotonic() + timeout
    pending = list(actors)
    while pending and time.monotonic() < deadline:
        refs = [a.ready.options(max_task_retries=0).remote() for a in pending]
        ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
        alive = []
        for actor, ref in zip(pending, refs):
            try:
                ray.get(ref, timeout=0)
                alive.append(actor)
            except ray.exceptions.RayActorError:
                pass
            except ray.exceptions.RayError:  # answered with an error or not yet: still there
                alive.append(actor)
        pending = alive
        if pending:
            time.sleep(0.02)


def _import_paths() -> list[str]:
    """The driver's ``sys.path`` directories, so actors import what the driver imports."""
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        if os.path.isdir(p) and p not in out:
            out.append(p)
    return out
