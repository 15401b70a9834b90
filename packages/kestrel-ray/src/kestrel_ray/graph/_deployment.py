"""``Deployment``: the actors of one graph, started, owned and killed in one place.

A graph's node actors are started by :func:`~kestrel_ray.graph._actors.start_node_actors` and its
store here; the deployment keeps their handles, and :meth:`Deployment.shutdown` kills every
actor it started (never a store passed in). A :class:`~kestrel_ray.DeployedGraph` holds one
deployment (it is not one) and is the only caller of the actors' methods; the deployment hands
it the handles (:attr:`Deployment.handles`) and the store (:meth:`Deployment.deployed_store`).

Randomness follows kestrel-core's scheme: the run's ``SeedSequence`` spawns one child per node
in forward order (kept in :attr:`Deployment.seqs`; a call spawns one grandchild per chunk), and
one integer of the root seeds the store's random subsets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray
from ray import cloudpickle
from ray.actor import ActorHandle

from kestrel_core import BufferConfig, Graph, KestrelError, seed_sequence
from kestrel_ray.graph._actors import (
    check_deployable,
    check_graph_config,
    import_paths,
    kill_actors,
    start_node_actors,
    start_replica,
)
from kestrel_ray.graph._arrays import observation_columns
from kestrel_ray.graph._auto import resolve_auto_actors
from kestrel_ray.graph._refs import Column
from kestrel_ray.node._handles import NodeHandle
from kestrel_ray.node._multiplex import MultiplexNodeWrapper
from kestrel_ray.node._wrapper import NodeWrapper
from kestrel_ray.store._handle import StoreHandle

__all__ = ["Deployment"]


class Deployment:
    """The actors of a graph: one per node (``num_actors`` replicas when > 1) plus a sample store.

    Starts them (:meth:`deploy`), owns them (:attr:`actors`) and kills them (:meth:`shutdown`);
    the :class:`~kestrel_ray.DeployedGraph` that holds it makes the calls.

    Args:
        graph, seed, store, run_dir, buffer, ready_timeout, estimators: see
            :class:`~kestrel_ray.DeployedGraph`.
        wrapper_cls: the node actor class (``ray.remote`` is applied at :meth:`deploy`; default
            :class:`~kestrel_ray.NodeWrapper`).
    """

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
        self.graph = graph
        self._estimators = bool(estimators)
        self._root = seed_sequence(seed)
        self.seed = self._root.entropy
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self._buffer = buffer
        self._store: StoreHandle | None = (
            store if store is None or isinstance(store, StoreHandle) else StoreHandle(store)
        )
        self._own_store = store is None
        self._ready_timeout = float(ready_timeout)
        #: the node actor class
        self.wrapper_cls: type = NodeWrapper if wrapper_cls is None else wrapper_cls
        order = graph.forward_order
        #: node → its ``SeedSequence`` (children of the root, in forward order)
        self.seqs = dict(zip(order, self._root.spawn(len(order))))
        self._handles: dict[str, NodeHandle | MultiplexNodeWrapper] = {}
        self._obs_columns: dict[str, Column] = {}
        self.auto_counts: dict[str, int] = {}
        #: node → replicas started mid-run and not yet ready: ``(replica, actor, ready ref)``
        self._starting: dict[str, list[tuple[int, Any, Any]]] = {}
        self._next_replica: dict[str, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def deployed(self) -> bool:
        """Whether the actors are running."""
        return bool(self._handles)

    @property
    def store(self) -> Any:
        """The store's :class:`~kestrel_ray.StoreHandle` (``None`` before :meth:`deploy` when none
        was given)."""
        return self._store

    @property
    def actors(self) -> list[Any]:
        """Every node actor this graph started (replicas included), plus its own store."""
        out = [a for h in self._handles.values() for a in h.actors]
        out += [actor for group in self._starting.values() for _, actor, _ in group]
        if self._own_store and self._store is not None:
            out.append(self._store.actor)
        return out

    def deploy(self) -> Deployment:
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
        check_graph_config(self.graph)
        #: node → its replicas at deployment, for the nodes with ``num_actors: auto``
        self.auto_counts = {
            name: resolve_auto_actors(node, name)
            for name, node in self.graph.nodes.items()
            if node.auto_actors
        }
        check_deployable(self.graph, self.auto_counts)
        try:
            if self._store is None:
                self._store = self._start_store()
            self._handles = start_node_actors(
                self.graph,
                self.seqs,
                self.wrapper_cls,
                estimators=self._estimators,
                ready_timeout=self._ready_timeout,
                counts=self.auto_counts,
            )
            self._obs_columns = observation_columns(self.graph, self.graph.observations)
        except BaseException:
            self.shutdown(wait=0)
            raise
        return self

    # -- replicas of num_actors: auto ---------------------------------------------------------
    def replicas(self, name: str) -> int:
        """Replicas of node ``name``: those serving it and those starting (see
        :meth:`add_replicas`); the ones that finished starting join the node here."""
        self._settle(name)
        handle = self._handles[name]
        serving = len(handle.replicas) if isinstance(handle, MultiplexNodeWrapper) else 1
        return serving + len(self._starting.get(name, []))

    def add_replicas(self, name: str, k: int) -> int:
        """Start ``k`` more replicas of multiplexed node ``name`` without waiting; each joins
        the node once it is ready (:meth:`replicas`, called from the launch loop), so the calls
        submitted after that split their rows over it too. Returns how many were started.

        Raises:
            KestrelError: the node is not multiplexed (only ``num_actors: auto`` nodes grow).
        """
        handle = self._handles[name]
        if not isinstance(handle, MultiplexNodeWrapper):
            raise KestrelError(f"node {name!r} is not multiplexed: its replicas cannot grow")
        node = self.graph.nodes[name]
        cls: Any = ray.remote(self.wrapper_cls)
        blob = cloudpickle.dumps(node)
        base = self.seqs[name].generate_state(2)
        starting = self._starting.setdefault(name, [])
        first = self._next_replica.get(name, len(handle.replicas))
        for i in range(first, first + int(k)):
            actor = start_replica(cls, node, blob, base, i, import_paths())
            starting.append((i, actor, actor.ready.remote()))
        self._next_replica[name] = first + int(k)
        return int(k)

    def drop_replicas(self, name: str, k: int) -> int:
        """Stop up to ``k`` replicas of node ``name`` that have not finished starting (the
        cluster shrank before they joined); returns how many. Serving replicas are never
        stopped here: one whose node was lost may hold calls in flight, which Ray runs again
        once it restarts (:mod:`kestrel_ray.graph._auto`)."""
        gone = 0
        for _, actor, _ in list(self._starting.get(name, [])):
            if gone >= k:
                break
            ray.kill(actor)
            self._starting[name] = [e for e in self._starting[name] if e[1] is not actor]
            gone += 1
        return gone

    def _settle(self, name: str) -> None:
        """Let the replicas of ``name`` that finished starting join it (one that failed to
        start is dropped)."""
        starting = self._starting.get(name)
        if not starting:
            return
        refs = [ref for _, _, ref in starting]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        handle = self._handles[name]
        assert isinstance(handle, MultiplexNodeWrapper)
        for _, actor, ref in starting:
            if ref not in done:
                continue
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError:
                continue  # it did not start: not a replica
            handle.add(NodeHandle(name, actor, info["fields"], self.graph.nodes[name].timeout))
            reopen = getattr(actor, "open_log", None)
            if reopen is not None:  # a run's actor: it collects its log once told to
                reopen.remote()
        self._starting[name] = [e for e in starting if e[2] not in done]

    def _start_store(self) -> StoreHandle:
        return StoreHandle.for_buffer(
            self._buffer,
            run_dir=self.run_dir,
            seed=int(self._root.generate_state(1)[0]),
            wait=False,
        )

    def shutdown(self, wait: float = 10.0) -> None:
        """Kill every actor this graph started (not a store passed in). Idempotent.

        Args:
            wait: seconds to wait until Ray reports every killed actor dead (``ray.kill`` is
                asynchronous; 0 returns at once).
        """
        kill_actors(self.actors, wait)
        self._handles = {}
        self._starting = {}
        self._obs_columns = {}
        if self._own_store:
            self._store = None

    @property
    def latents(self) -> list[str]:
        """The nodes whose estimators are deployed (none with ``estimators=False``)."""
        return self.graph.latents if self._estimators else []

    @property
    def handles(self) -> dict[str, NodeHandle | MultiplexNodeWrapper]:
        """node → its driver-side handle (empty when not deployed)."""
        return self._handles

    @property
    def obs_columns(self) -> dict[str, Column]:
        """The graph's own observations as broadcast columns (empty when not deployed)."""
        return self._obs_columns

    def handle(self, name: str) -> NodeHandle | MultiplexNodeWrapper:
        """The driver-side handle of node ``name`` (to submit calls with explicit conditions).

        Raises:
            KestrelError: not deployed. GraphError: unknown node.
        """
        self.check_deployed()
        self.graph[name]
        return self._handles[name]

    def estimator(self, name: str) -> NodeHandle:
        """The handle of estimator node ``name`` (never multiplexed)."""
        handle = self._handles[name]
        assert isinstance(handle, NodeHandle)  # estimator nodes are never multiplexed (deploy)
        return handle

    def deployed_store(self) -> StoreHandle:
        """The store's handle once deployed.

        Raises:
            KestrelError: not deployed.
        """
        self.check_deployed()
        assert self._store is not None  # deploy() starts one when none was given
        return self._store

    def check_deployed(self) -> None:
        """Raise unless deployed.

        Raises:
            KestrelError: not deployed.
        """
        if not self.deployed:
            raise KestrelError(
                "DeployedGraph is not deployed; call deploy() (or use it in a `with`)"
            )
