"""``DeployedGraph``: a graph running on Ray actors, driven with ObjectRefs only.

The driver never reads simulated data: it submits every node's call at once (a downstream
actor awaits its parents' refs itself), reads back only the small meta dict of each call
(per-sample shapes, dtypes, non-finite counts, or the error of a failed node), and hands block
refs to the store. Arrays come back only from :meth:`DeployedGraph.to_arrays`, when asked, and
enter only as observations or given samples (:mod:`kestrel_ray.graph._arrays`). The graph owns every
actor it starts through the :class:`~kestrel_ray.graph._deployment.Deployment` it holds (which
starts, keeps and kills them) and is the only caller of their methods.

Randomness follows kestrel-core's scheme: the run's ``SeedSequence`` spawns one child per node
in forward order, and each call spawns one grandchild per chunk of that node's child — on the
driver, so the streams do not depend on how many replicas serve a node or which one runs a
chunk. All nodes of one call share one chunk grid (:func:`~kestrel_ray.chunk_grid`), so every
chunk of a trace can be stored as one block.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
import ray
from ray.actor import ActorHandle

from kestrel_core import (
    BufferConfig,
    ConfigError,
    Graph,
    GraphError,
    GraphRunner,
    RunConfig,
    ShapeError,
    StoreWarning,
    check_count,
)
from kestrel_core.internal import call_conditions, forward_plan, inference_plan, resimulation_plan
from kestrel_ray._errors import unwrap_error
from kestrel_ray.graph._arrays import given_columns, observation_columns, put_rows, read_arrays
from kestrel_ray.graph._deployment import Deployment
from kestrel_ray.graph._refs import Column, RefTrace, chunk_grid
from kestrel_ray.node._estimator_files import transfer_estimators
from kestrel_ray.node._handles import NodeHandle, Pending, SubmittedTrace, collect_trace
from kestrel_ray.node._multiplex import MultiplexNodeWrapper
from kestrel_ray.node._wrapper import NodeWrapper
from kestrel_ray.store._handle import StoreHandle

__all__ = ["DeployedGraph"]

G = TypeVar("G", bound="DeployedGraph")


class DeployedGraph:
    """A graph on Ray actors — one per node (``num_actors`` replicas when > 1) plus a sample
    store — driven with ObjectRefs only: sampling calls, appends, training, estimator files.

    Shape symbols: N samples of a call, D_key the per-sample shape of a flat key.

    Args:
        graph: a validated :class:`kestrel_core.Graph`.
        seed: run seed (int ≥ 0), a ``numpy.random.SeedSequence`` (a later launch's stream of
            the run's seed) or ``None`` for fresh entropy (``self.seed`` records its entropy).
        store: an existing store to append to, its :class:`~kestrel_ray.StoreHandle` or actor
            handle (not killed by :meth:`shutdown`), or ``None`` to start one at :meth:`deploy`.
        run_dir: run directory: :meth:`save` and :meth:`load` default to ``<run_dir>/graph``,
            snapshots go to ``<run_dir>/buffer/snapshots``.
        buffer: a :class:`kestrel_core.BufferConfig` (or mapping) for the store started here;
            ``None`` keeps every sample (no eviction, no validation split).
        ready_timeout: seconds to wait for the next actor to start (the wait goes on while
            actors keep starting).
        estimators: build the latent nodes' estimators; ``False`` deploys simulators only (forward
            sampling without the estimators' dependencies, e.g. torch).
        wrapper_cls: the node actor class (default :attr:`wrapper_cls`, a
            :class:`~kestrel_ray.NodeWrapper`); a launch passes one that also writes logs.

    Example:
        ``with DeployedGraph(graph, seed=0) as dg: arrays = dg.to_arrays(dg.sample(1024))``
    """

    #: the actor class of the nodes (``ray.remote`` is applied at deploy; a subclass or the
    #: ``wrapper_cls`` argument swaps it)
    wrapper_cls: type = NodeWrapper

    def __init__(
        self,
        graph: Graph,
        *,
        seed: int | np.random.SeedSequence | None = None,
        store: StoreHandle | ActorHandle | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        buffer: BufferConfig | Mapping[str, Any] | None = None,
        ready_timeout: float = 60.0,
        estimators: bool = True,
        wrapper_cls: type | None = None,
    ):
        if wrapper_cls is not None:
            self.wrapper_cls = wrapper_cls
        #: the actors: started, kept and killed there; every call to them is made here
        self._deployment = Deployment(
            graph,
            seed=seed,
            store=store,
            run_dir=run_dir,
            buffer=buffer,
            ready_timeout=ready_timeout,
            estimators=estimators,
            wrapper_cls=self.wrapper_cls,
        )
        #: node → the epoch count of the weights the last save wrote (:meth:`estimator_files`)
        self.saved_epochs: dict[str, int | None] = {}

    @classmethod
    def from_config(
        cls: type[G],
        config: RunConfig,
        *,
        seed: int | None = None,
        store: StoreHandle | ActorHandle | None = None,
    ) -> G:
        """Build from a :class:`kestrel_core.RunConfig` (graph, buffer, run directory)."""
        return cls(
            config.graph, seed=seed, store=store, run_dir=config.run_dir, buffer=config.buffer
        )

    # -- lifecycle (the deployment's) ----------------------------------------------------------
    def __enter__(self: G) -> G:
        return self.deploy()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    @property
    def graph(self) -> Graph:
        """The deployed :class:`kestrel_core.Graph`."""
        return self._deployment.graph

    @property
    def seed(self) -> Any:
        """The entropy of the run's ``SeedSequence`` (the seed given, or the one drawn)."""
        return self._deployment.seed

    @property
    def run_dir(self) -> str | None:
        """The run directory (``None``: none given)."""
        return self._deployment.run_dir

    @property
    def deployed(self) -> bool:
        """Whether the actors are running."""
        return self._deployment.deployed

    @property
    def store(self) -> Any:
        """The store's :class:`~kestrel_ray.StoreHandle` (``None`` before :meth:`deploy` when none
        was given)."""
        return self._deployment.store

    @property
    def actors(self) -> list[Any]:
        """Every node actor this graph started (replicas included), plus its own store."""
        return self._deployment.actors

    def deploy(self: G) -> G:
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
        self._deployment.deploy()
        return self

    def shutdown(self, wait: float = 10.0) -> None:
        """Kill every actor this graph started (not a store passed in). Idempotent.

        Args:
            wait: seconds to wait until Ray reports every killed actor dead (``ray.kill`` is
                asynchronous; 0 returns at once).
        """
        self._deployment.shutdown(wait)

    def handle(self, name: str) -> NodeHandle | MultiplexNodeWrapper:
        """The driver-side handle of node ``name`` (to submit calls with explicit conditions).

        Raises:
            KestrelError: not deployed. GraphError: unknown node.
        """
        return self._deployment.handle(name)

    def _check_deployed(self) -> None:
        """Raise :class:`~kestrel_core.KestrelError` unless deployed."""
        self._deployment.check_deployed()

    @property
    def _latents(self) -> list[str]:
        return self._deployment.latents

    # -- sampling ------------------------------------------------------------------------------
    def sample(self, n: int) -> RefTrace:
        """Forward-simulate every node in forward order (latent roots from their priors).

        Returns:
            :class:`RefTrace` of N samples with every node's keys.

        Raises:
            CountError: ``n`` is not a non-negative integer. Node failures as in :meth:`run`.
        """
        return self.run(n, forward_plan(self.graph))

    def sample_posterior(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Posterior draws of the latent nodes (inference order) given the observations.

        Args:
            n: number of samples.
            observations: ``{node: x_o}`` without batch axis, over the graph's own observations.
        """
        return self.run(
            n, inference_plan(self.graph, "sample_posterior", observations or ()), observations
        )

    def sample_proposal(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Proposal draws of the latent nodes (inference order) given the observations."""
        return self.run(
            n, inference_plan(self.graph, "sample_proposal", observations or ()), observations
        )

    def sample_ppd(self, n: int, observations: Mapping[str, Any] | None = None) -> RefTrace:
        """Posterior predictive: latents from the posterior, every other node simulated from them."""
        plan = resimulation_plan(self.graph, "sample_posterior", self._latents, observations or ())
        return self.run(n, plan, observations)

    def simulate_from_proposal(
        self, n: int, observations: Mapping[str, Any] | None = None
    ) -> RefTrace:
        """The joint trace a resimulation round appends: latents (``value`` and ``log_prob``)
        from the proposal, every other node forward-simulated from them."""
        return self.submit_from_proposal(n, observations).collect()

    def submit_from_proposal(
        self, n: int, observations: Mapping[str, Any] | None = None
    ) -> SubmittedTrace:
        """:meth:`simulate_from_proposal` without waiting (see :meth:`submit`)."""
        plan = resimulation_plan(self.graph, "sample_proposal", self._latents, observations or ())
        return self.submit(n, plan, observations)

    def ingest(self, values: Mapping[str, Any]) -> RefTrace:
        """Given samples of every node (e.g. read from disk) as a trace like :meth:`sample`'s.

        Each node's actor receives its values instead of simulating them: they pass the same
        boundary checks as a simulator's output, and a node whose simulator has ``log_prob``
        (a prior) adds its ``log_prob`` — so the trace has the keys a prior simulation has.

        Args:
            values: node → array ``(N, *D)``, for every node of the graph.

        Returns:
            :class:`RefTrace` of N samples (no keys when N is 0).

        Raises:
            GraphError: a node has no values, or values name a node the graph does not have.
            ShapeError: the nodes' arrays disagree on N. Node failures as in :meth:`run`
                (e.g. non-numeric values).
        """
        self._check_deployed()
        n, given = given_columns(self.graph, values)
        if n == 0:
            return RefTrace(0)
        return collect_trace(n, self._submit(n, forward_plan(self.graph), {}, given))

    def run(
        self,
        n: int,
        plan: Sequence[tuple[str, str]],
        observations: Mapping[str, Any] | None = None,
        *,
        rows: Mapping[str, Any] | None = None,
    ) -> RefTrace:
        """Submit ``(node, method)`` calls in order, then wait for their meta dicts.

        A node's conditions are the latest values of its parents (``sample``, and nodes without
        estimator) or of its evidence plus any available scaffolds (estimator methods); observed
        nodes provide one broadcast ref each. A node planned twice keeps its last result.

        Args:
            n: number of samples N. plan: the calls. observations: node → ``x_o`` (shape
                ``D``, no batch axis) over the graph's own. rows: node → array ``(N, *D)``, a
                value per sample (e.g. m observations, each repeated for its draws), over
                ``observations``; it enters the object store as one block per node.

        Returns:
            :class:`RefTrace` of the planned nodes' keys (no keys when ``n`` is 0).

        Raises:
            CountError: bad ``n``. GraphError: a needed condition has no value.
            ConfigError: ``rows`` that are not numeric. ShapeError: ``rows`` of another
                length than ``n``.
            EstimatorError: an inference method is planned for a node with evidence but no
                estimator (or one deployed with ``estimators=False``).
            KestrelError: a node failed (its own error, naming the node; user exceptions carry a
                note naming the node).
        """
        return self.submit(n, plan, observations, rows=rows).collect()

    def submit(
        self,
        n: int,
        plan: Sequence[tuple[str, str]],
        observations: Mapping[str, Any] | None = None,
        *,
        rows: Mapping[str, Any] | None = None,
    ) -> SubmittedTrace:
        """:meth:`run` without waiting: the calls are submitted (queued on the node actors
        behind whatever they run); :meth:`SubmittedTrace.collect` waits and raises as
        :meth:`run` does. ``n`` = 0 calls no simulator."""
        self._check_deployed()
        n = check_count(n)
        avail: dict[str, Column] = dict(self._deployment.obs_columns)
        if observations:
            avail.update(observation_columns(self.graph, observations))
        for name, value in (rows or {}).items() if n else ():
            avail[name] = put_rows(value, f"rows of {name!r}", ConfigError)
            if avail[name].n != n:
                raise ShapeError(f"rows of {name!r}: {avail[name].n} rows for {n} samples")
        return SubmittedTrace(n, self._submit(n, plan, avail, {}) if n else {})

    def _submit(
        self,
        n: int,
        plan: Sequence[tuple[str, str]],
        known: dict[str, Column],
        given: Mapping[str, Column],
    ) -> dict[str, tuple[str, Pending]]:
        """Submit the plan, each call conditioned on the columns ``known`` so far (a node in
        ``given`` gets only its own values); node → ``(method, Pending)``, for
        :func:`~kestrel_ray.node._handles.collect_trace`."""
        nodes = self.graph.nodes
        names = list(dict.fromkeys(name for name, _ in plan))
        chunks = chunk_grid(
            n, [(nodes[m].sample_chunk_size, self._replica_count(m)) for m in names]
        )
        calls: dict[str, tuple[str, Pending]] = {}
        latents = set(self._latents)
        for name, method in plan:
            if name in given:  # seeds=None: the node's own streams stay as they were
                pending = self._deployment.handles[name].submit(
                    method, n, {name: given[name]}, chunks, None
                )
            else:
                conds = call_conditions(
                    self.graph, name, method, latent=name in latents, known=known
                )
                pending = self._deployment.handles[name].submit(
                    method, n, conds, chunks, self._deployment.seqs[name].spawn(len(chunks))
                )
            calls.pop(name, None)
            calls[name] = (method, pending)
            known[name] = pending.columns["value"]
        return calls

    # -- store and arrays ----------------------------------------------------------------------
    def append(self, trace: RefTrace, *, wait: bool = True) -> Any:
        """Append a trace to the store, one block per chunk (no data passes the driver).

        Args:
            trace: a trace from one call of this graph (its keys share block boundaries).
            wait: return the new ids (int64 ``(N,)``, rows marked invalid included); ``False``
                returns at once the ObjectRef to pass to ``self.store.appended``
                (:meth:`~kestrel_ray.StoreHandle.appended`).

        Warns:
            StoreWarning: more samples at once than the buffer holds.

        Raises:
            StoreError: the keys or per-sample shapes break the store's key schema, or the
                trace's keys do not share blocks.
        """
        store = self._deployment.deployed_store()
        ref = store.submit_append(trace.blocks())
        if not wait:
            return ref
        done = store.appended(ref)
        for note in done.notes:
            warnings.warn(note, StoreWarning, stacklevel=2)
        return done.ids

    def buffer_stats(self, timeout: float | None = None) -> dict[str, int]:
        """The store's counts (``training``, ``validation``, ``total``, …).

        Raises:
            StoreError: the store did not answer within ``timeout`` seconds.
        """
        return self._deployment.deployed_store().with_options(timeout=timeout).stats()

    def store_cpu_seconds(self, timeout: float | None = None) -> float:
        """CPU seconds (user + system) the store's process has used since the store started.

        Raises:
            StoreError: the store did not answer within ``timeout`` seconds.
        """
        store = self._deployment.deployed_store().with_options(timeout=timeout)
        return float(store.wait(store.submit_cpu_seconds()))

    def to_arrays(
        self, trace: RefTrace, keys: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Read a trace into arrays (one batched get; see :func:`~kestrel_ray.graph._arrays.read_arrays`).

        Returns:
            flat key → array ``(N, *D_key)``; may be a read-only view of a stored block.
        """
        return read_arrays(trace, keys)

    # -- training and state --------------------------------------------------------------------
    def start_training(self) -> dict[str, Any]:
        """Start ``train(store)`` on every estimator node; returns ``{node: ObjectRef}``."""
        self._check_deployed()
        return {
            name: self._deployment.estimator(name).train_ref(self._deployment.store)
            for name in self._latents
        }

    def configure_rounds(
        self, epochs_per_round: int = 1, *, deterministic: bool = False, open: bool = False
    ) -> None:
        """Give every estimator node a fresh round schedule (:class:`kestrel_core.Rounds`) for
        the next :meth:`start_training`; blocks until every node has it.

        Raises:
            ConfigError: ``epochs_per_round`` is not an integer ≥ 1 (from the actor).
        """
        self._check_deployed()
        refs = {
            name: self._deployment.estimator(name).actor.configure_rounds.remote(
                epochs_per_round, deterministic, open
            )
            for name in self._latents
        }
        for name, ref in refs.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayError as err:
                raise unwrap_error(err, name, "configure_rounds") from err

    def round_ready_refs(self, k: int, *, marked: bool = False) -> dict[str, Any]:
        """``{node: ObjectRef}`` resolving when round ``k`` may be drawn from that node's
        proposal, to the round its next ``sample_proposal`` call draws from. ``marked``:
        resolving at once, to ``k`` where training fixed round ``k``'s proposal at one of its
        epochs, else to 0."""
        self._check_deployed()
        return {
            name: self._deployment.estimator(name).actor.round_ready.remote(int(k), bool(marked))
            for name in self._latents
        }

    def round_appended(self, k: int, last: bool = False) -> None:
        """Tell every estimator node that round ``k`` is in the store (``last``: and no round
        follows); fire and forget."""
        for name in self._latents:
            self._deployment.estimator(name).actor.round_appended.remote(int(k), bool(last))

    def close_rounds(self, last: int | None = None) -> None:
        """Tell every estimator node that no round follows round ``last`` (``None``: none
        follows what was appended, e.g. when stopping); fire and forget."""
        for name in self._latents:
            self._deployment.estimator(name).actor.close_rounds.remote(last)

    def request_stop(self) -> None:
        """Ask every estimator to stop after its current step (fire and forget)."""
        for name in self._latents:
            self._deployment.estimator(name).request_stop()

    def status(self, timeout: float = 2.0, *, nodes: Iterable[str] | None = None) -> dict[str, Any]:
        """Node statuses (a list per multiplexed node) and the store's counts.

        Args:
            timeout: seconds each answer may take.
            nodes: ask only these nodes (e.g. the estimators, for a progress poll: a node with
                128 replicas is 128 calls); ``None``: every node.

        Raises:
            GetTimeoutError: a node actor did not answer within ``timeout``.
            StoreError: the store did not answer within ``timeout``.
        """
        self._check_deployed()
        handles = self._deployment.handles
        names = list(handles) if nodes is None else [m for m in nodes if m in handles]
        refs = {name: handles[name].status_refs() for name in names}
        out: dict[str, Any] = {name: ray.get(r, timeout=timeout) for name, r in refs.items()}
        out = {name: v[0] if len(v) == 1 else v for name, v in out.items()}
        out["_store"] = self.buffer_stats(timeout)
        return out

    def open_logs(self) -> dict[str, list[dict[str, Any]]]:
        """Call ``open_log()`` on every actor (actors of a ``RunNodeWrapper``).

        Returns:
            node → one ``open_log`` answer per actor (``{"replica", "pid", "node_id"}``).

        Raises:
            KestrelError: an actor failed (naming the node).
        """
        self._check_deployed()
        refs = {name: h.open_log_refs() for name, h in self._deployment.handles.items()}
        out = {}
        for name, node_refs in refs.items():
            try:
                out[name] = ray.get(node_refs)
            except ray.exceptions.RayError as err:
                raise unwrap_error(err, name, "open_log") from err
        return out

    def _replica_count(self, name: str) -> int:
        handle = self._deployment.handles[name]
        return len(handle.replicas) if isinstance(handle, MultiplexNodeWrapper) else 1

    # -- replicas of num_actors: auto ------------------------------------------------------------
    @property
    def auto_counts(self) -> dict[str, int]:
        """node → the replicas ``num_actors: auto`` resolved to at deployment."""
        return dict(self._deployment.auto_counts)

    def replicas(self, name: str) -> int:
        """Replicas of node ``name``, serving or starting (those that finished starting join
        the node here)."""
        self._check_deployed()
        return self._deployment.replicas(name)

    def add_replicas(self, name: str, k: int) -> int:
        """Start ``k`` more replicas of a ``num_actors: auto`` node without waiting (they join
        once ready); returns how many. See :mod:`kestrel_ray.graph._auto`.

        Raises:
            KestrelError: not deployed, or the node is not multiplexed.
        """
        self._check_deployed()
        return self._deployment.add_replicas(name, k)

    def drop_replicas(self, name: str, k: int) -> int:
        """Remove up to ``k`` replicas of a ``num_actors: auto`` node that wait for a node (or
        have not started); returns how many."""
        self._check_deployed()
        return self._deployment.drop_replicas(name, k)

    def node_actors(self) -> dict[str, list[Any]]:
        """node → its actor handles (replica ``i`` at index ``i``)."""
        self._check_deployed()
        return {name: list(h.actors) for name, h in self._deployment.handles.items()}

    def save(
        self, directory: str | os.PathLike[str] | None = None, nodes: Iterable[str] | None = None
    ) -> None:
        """Save estimators to ``<directory>/<node>`` (default ``<run_dir>/graph``).

        Args:
            directory: the graph folder. nodes: which estimator nodes (default: all).

        Raises:
            ConfigError: no directory and no run directory. KestrelError: an estimator failed.
        """
        self.estimator_files("save", directory, nodes)

    def load(
        self, directory: str | os.PathLike[str] | None = None, nodes: Iterable[str] | None = None
    ) -> None:
        """Load estimators from ``<directory>/<node>`` (default ``<run_dir>/graph``); as :meth:`save`."""
        self.estimator_files("load", directory, nodes)

    def estimator_files(
        self,
        method: Literal["save", "load"],
        directory: str | os.PathLike[str] | None,
        nodes: Iterable[str] | None = None,
    ) -> dict[str, str]:
        """Save or load estimators, ``<directory>/<node>`` each, all at once: the one place
        estimator files are written and read — by the driver (see :mod:`._estimator_files`).

        Args:
            method: ``"save"`` or ``"load"``.
            directory: the graph folder (``None``: ``<run_dir>/graph``).
            nodes: estimator nodes (default: every one).

        Returns:
            node → its folder. After ``"save"``, :attr:`saved_epochs` holds node → the epoch
            count of the weights written (``None`` where the estimator reports none).

        Raises:
            ConfigError: no directory and no run directory. GraphError: a node without estimator.
            KestrelError: an estimator failed (its error, naming the node and the folder).
        """
        self._check_deployed()
        if directory is None:
            if self.run_dir is None:
                raise ConfigError(f"{method}: give a directory or a run_dir")
            directory = os.path.join(self.run_dir, "graph")
        names = self._latents if nodes is None else list(nodes)
        for name in names:
            if name not in self._latents:
                raise GraphError(f"{method}: node {name!r} has no estimator deployed")
        folders = {name: os.path.join(os.fspath(directory), name) for name in names}
        actors = {name: self._deployment.estimator(name).actor for name in names}
        self.saved_epochs = transfer_estimators(method, actors, folders)
        return folders


if TYPE_CHECKING:  # mypy proves that a DeployedGraph is a kestrel_core.GraphRunner

    def _is_graph_runner(dg: DeployedGraph) -> GraphRunner:
        return dg
