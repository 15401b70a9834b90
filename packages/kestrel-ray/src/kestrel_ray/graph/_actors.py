"""Starting and stopping the node actors of a graph (on behalf of :class:`~kestrel_ray.DeployedGraph`).

* :func:`check_deployable` — what can be known before any actor starts: estimator nodes are
  not multiplexed, and every resource request can be met by the cluster.
* :func:`start_node_actors` — one actor per node (``num_actors`` replicas when > 1), each given
  the pickled node, its seed and the driver's import path; waits until every actor has built
  its simulator (and estimator) and returns the driver-side handles. On any failure every
  actor it started is killed before the error is raised.
* :func:`kill_actors` — kill actors and wait until Ray reports them dead.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import ray
from ray import cloudpickle

from kestrel_core import ConfigError, Graph, KestrelError, Node
from kestrel_ray._errors import unwrap_error
from kestrel_ray.cluster._resources import actor_options, check_resources
from kestrel_ray.node._ensemble import ensemble_size
from kestrel_ray.node._handles import NodeHandle
from kestrel_ray.node._multiplex import MultiplexNodeWrapper

__all__ = [
    "check_deployable",
    "check_graph_config",
    "start_node_actors",
    "kill_actors",
    "import_paths",
    "start_replica",
]


def check_deployable(graph: Graph, counts: Mapping[str, int] | None = None) -> None:
    """Raise before any actor starts if the graph cannot be deployed on this cluster.

    Args:
        graph: the graph. counts: node → its replicas where not ``num_actors`` (the resolved
            ``num_actors: auto``).

    Raises:
        GraphError: the graph is invalid.
        ConfigError: an estimator node has ``num_actors > 1`` or a ``timeout``, or a resource
            request can never be met ("node 'x' requests 2 GPUs; the cluster has 0"); an
            estimator node with ``ensemble: K`` counts K actors (one a member, each with the
            node's ``ray`` options), so a cluster that cannot hold every member is refused
            here rather than by a member's start timeout.
    """
    check_graph_config(graph)
    counts = counts or {}
    check_resources(
        [
            (name, _actors_of(name, node, counts), actor_options(node))
            for name, node in graph.nodes.items()
        ]
    )


def _actors_of(name: str, node: Node, counts: Mapping[str, int]) -> int:
    """The actors node ``name`` starts: its ensemble's members for an estimator node, else
    its replicas (the resolved ``auto`` count where there is one)."""
    if node.estimator is not None:
        return ensemble_size(node.estimator)
    return counts.get(name, node.num_actors)


def check_graph_config(graph: Graph) -> None:
    """The checks of :func:`check_deployable` that need no cluster (a launch makes them before
    it writes anything).

    Raises:
        GraphError: the graph is invalid.
        ConfigError: an estimator node has ``num_actors > 1`` or a ``timeout``.
    """
    graph.validate()
    for name, node in graph.nodes.items():
        if node.estimator is not None and node.timeout is not None:
            raise ConfigError(
                f"graph.{name}.timeout: node {name!r} has an estimator, whose actor is never "
                "restarted (it holds the training state); a timeout applies to simulator nodes"
            )
        if node.estimator is not None and (node.num_actors > 1 or node.auto_actors):
            raise ConfigError(
                f"graph.{name}.num_actors: node {name!r} has an estimator and "
                f"num_actors={'auto' if node.auto_actors else node.num_actors}; estimator "
                "nodes cannot be "
                "multiplexed (set num_actors: 1)"
            )


def start_node_actors(
    graph: Graph,
    seeds: dict[str, np.random.SeedSequence],
    wrapper_cls: type,
    *,
    estimators: bool = True,
    ready_timeout: float = 60.0,
    counts: Mapping[str, int] | None = None,
) -> dict[str, NodeHandle | MultiplexNodeWrapper]:
    """Start every node's actor(s) and wait until each is ready.

    Args:
        graph: a validated graph (see :func:`check_deployable`).
        seeds: node → its ``SeedSequence``; replica ``i`` is seeded with ``[state, i]``.
        wrapper_cls: the actor class (a :class:`~kestrel_ray.NodeWrapper`; ``ray.remote`` is
            applied here).
        estimators: build the estimators of latent nodes (``False``: simulators only).
        ready_timeout: seconds to wait for the next actor to start: the wait goes on while
            actors keep starting (128 replicas booting on a few cores take minutes), and
            ends when none started for that long.
        counts: node → its replicas where not ``num_actors`` (the resolved ``auto``); a node
            with ``num_actors: auto`` is always multiplexed, so replicas can join it.

    Returns:
        node → :class:`NodeHandle` (or :class:`MultiplexNodeWrapper` over its replicas).

    Raises:
        SimulatorError, EstimatorError: a node's simulator or estimator failed to build (the
            node's name and the original exception text).
        KestrelError: no actor started for ``ready_timeout`` seconds while some had not.
    """
    paths = import_paths()
    started: list[tuple[str, int, Any]] = []
    try:
        cls: Any = ray.remote(wrapper_cls)
        for name, node in graph.nodes.items():
            blob = cloudpickle.dumps(node if estimators else replace(node, estimator=None))
            base = seeds[name].generate_state(2)
            for i in range((counts or {}).get(name, node.num_actors)):
                started.append((name, i, start_replica(cls, node, blob, base, i, paths)))
        infos = _wait_ready(started, ready_timeout)
    except BaseException:
        for _, _, actor in started:
            ray.kill(actor)
        raise
    handles: dict[str, NodeHandle | MultiplexNodeWrapper] = {}
    for name in graph.nodes:
        reps = [
            NodeHandle(name, actor, infos[(name, i)]["fields"], graph.nodes[name].timeout)
            for (m, i, actor) in started
            if m == name
        ]
        auto = graph.nodes[name].auto_actors
        handles[name] = reps[0] if len(reps) == 1 and not auto else MultiplexNodeWrapper(name, reps)
    return handles


def start_replica(
    cls: Any, node: Node, blob: bytes, base: np.ndarray, i: int, paths: Sequence[str]
) -> Any:
    """Start replica ``i`` of ``node`` (``cls``: the ``ray.remote`` wrapper class; ``blob``: the
    pickled node; ``base``: the node's seed state): seeded ``[*base, i]``. Returns the actor."""
    return cls.options(**actor_options(node)).remote(
        blob,
        seed=np.random.SeedSequence([*base.tolist(), i]),
        import_paths=paths,
        replica=i,
    )


def _wait_ready(
    started: Sequence[tuple[str, int, Any]], timeout: float
) -> dict[tuple[str, int], dict]:
    ready_refs = {actor.ready.remote(): (name, i) for name, i, actor in started}
    deadline = time.monotonic() + timeout
    infos: dict[tuple[str, int], dict] = {}
    left_refs = list(ready_refs)
    while left_refs:
        done_refs, left_refs = ray.wait(
            left_refs, num_returns=1, timeout=max(0.0, deadline - time.monotonic())
        )
        if not done_refs:
            names = sorted({ready_refs[r][0] for r in left_refs})
            raise KestrelError(
                f"node actor(s) {names} did not start: none started in the last {timeout:g} s "
                f"({len(infos)} of {len(ready_refs)} started; resources taken by other work?)"
            )
        deadline = time.monotonic() + timeout  # progress: the next one gets as long
        name, i = ready_refs[done_refs[0]]
        try:
            infos[(name, i)] = ray.get(done_refs[0])
        except ray.exceptions.RayError as err:
            raise unwrap_error(err, name, "start") from err
    return infos


def kill_actors(actors: Sequence[Any], wait: float = 10.0) -> None:
    """Kill ``actors``; wait up to ``wait`` seconds until Ray reports every one dead.

    ``ray.kill`` is asynchronous; the wait polls ``ready`` until each call fails with
    :class:`ray.exceptions.RayActorError` (0 returns at once).
    """
    for actor in actors:
        ray.kill(actor)
    deadline = time.monotonic() + wait
    pending = list(actors) if wait > 0 else []
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


def import_paths() -> list[str]:
    """The driver's ``sys.path`` directories, so actors import what the driver imports."""
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        if os.path.isdir(p) and p not in out:
            out.append(p)
    return out
