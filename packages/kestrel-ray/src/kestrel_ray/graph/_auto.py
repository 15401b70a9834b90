"""``num_actors: auto``: simulator replicas that follow the cluster's matching resources.

A simulator node whose ``num_actors`` is ``auto`` gets one replica per slot of what each of its
actors requests (its ``ray`` options: ``num_cpus``, ``num_gpus``, ``memory``, ``resources``),
summed over the cluster's live nodes: a node offering ``{"sim": 4}`` holds 4 replicas of a
simulator requesting ``resources: {sim: 1}``, a node with 8 CPUs holds 4 of one requesting
``num_cpus: 2``. The count is taken from each node's *total* resources, so give the simulator a
resource of its own (``ray start --resources '{"sim": 8}'``) when other actors (an estimator,
the store) share those nodes' CPUs.

* At deployment the count is resolved once (:func:`resolve_auto_actors`; preflight and the dry
  run say what it resolves to).
* While a launch runs, :class:`AutoActors` reads the cluster's nodes every
  :data:`POLL_EVERY` seconds (from the launch loop, never per simulation) and, when the slots
  grew (a node joined), starts the new replicas
  (:meth:`~kestrel_ray.DeployedGraph.add_replicas`); the next simulation calls split their rows
  over every replica. When the slots shrank (a node left) before the replicas started for
  it joined, those are stopped (:meth:`~kestrel_ray.DeployedGraph.drop_replicas`). A serving
  replica of a node that left is Ray's to restart, as for a fixed count (its calls in flight
  run again once it is back): on a remaining node with a free slot, else the launch's restart
  watch stops the launch after ``KESTREL_RESTART_WAIT`` seconds
  (:mod:`kestrel.controller._restarts`). Stopping it instead would fail the calls it holds.

The chunk grid of a call depends on the replica count, so ``auto`` draws other numbers than
a fixed count would, and a deterministic launch refuses it (the launch says so).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from kestrel_core import ConfigError, Graph, Node
from kestrel_ray.cluster._resources import _demand, actor_options

__all__ = ["AUTO", "POLL_EVERY", "AutoActors", "actor_slots", "resolve_auto_actors"]


class ReplicaOwner(Protocol):
    """What :class:`AutoActors` asks of the deployed graph (a
    :class:`~kestrel_ray.DeployedGraph`; named by what is used, since the deployment resolves
    ``auto`` counts with this module)."""

    @property
    def graph(self) -> Graph: ...
    def replicas(self, name: str) -> int: ...
    def add_replicas(self, name: str, k: int) -> int: ...
    def drop_replicas(self, name: str, k: int) -> int: ...


#: the word in the config
AUTO = "auto"
#: seconds between two reads of the cluster's nodes while a launch runs
POLL_EVERY = 10.0


def actor_demand(node: Node, name: str) -> dict[str, float]:
    """What one actor of ``node`` requests (Ray resource name → amount).

    Raises:
        ConfigError: it requests nothing (no slot to count).
    """
    demand = _demand(actor_options(node))
    if not demand:
        raise ConfigError(
            f"graph.{name}.num_actors: auto counts the slots of what each replica requests, "
            f"but graph.{name}.ray requests nothing; give it a resource, e.g. "
            f"ray: {{resources: {{sim: 1}}}} with `ray start --resources '{{\"sim\": 8}}'`, "
            "or num_cpus: 1"
        )
    return demand


def actor_slots(demand: Mapping[str, float], nodes: Iterable[Mapping[str, float]]) -> int:
    """Replicas that fit: per node ``min over the requested resources of ⌊total / request⌋``,
    summed over ``nodes`` (each a node's total resources, Ray's names).

    Example:
        >>> actor_slots({"sim": 1}, [{"sim": 4, "CPU": 2}, {"CPU": 8}, {"sim": 2.5}])
        6
    """
    out = 0
    for resources in nodes:
        out += min(
            math.floor(float(resources.get(r, 0.0)) / float(amount) + 1e-9)
            for r, amount in demand.items()
        )
    return out


def cluster_resources() -> list[dict[str, float]]:
    """The total resources of each live node of the Ray cluster this process joined."""
    import ray

    return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]


def resolve_auto_actors(
    node: Node, name: str, nodes: Iterable[Mapping[str, float]] | None = None
) -> int:
    """The replicas ``num_actors: auto`` means for ``node`` on ``nodes`` (default: the live
    nodes of the Ray cluster).

    Raises:
        ConfigError: ``node`` requests nothing, or no node offers what it requests (the
            message names the request and the remedy).
    """
    demand = actor_demand(node, name)
    k = actor_slots(demand, cluster_resources() if nodes is None else nodes)
    if k < 1:
        want = ", ".join(f"{r}: {a:g}" for r, a in sorted(demand.items()))
        raise ConfigError(
            f"graph.{name}.num_actors: auto: no node of the cluster offers what one replica "
            f"requests ({want}); start a node that does (ray start --address … --resources …) "
            "or set num_actors to a number"
        )
    return k


class AutoActors:
    """Keeps the replicas of a deployed graph's ``auto`` nodes in step with the cluster.

    Args:
        dg: the :class:`~kestrel_ray.DeployedGraph` (its ``graph`` names the ``auto`` nodes).
        log: where each change is said.
        every: seconds between two reads of the cluster (:meth:`poll` does nothing sooner).
        nodes: returns the live nodes' total resources (default: :func:`cluster_resources`).

    Attributes:
        added, dropped: node → replicas started, removed by this watch so far.
    """

    def __init__(
        self,
        dg: ReplicaOwner,
        log: logging.Logger,
        *,
        every: float = POLL_EVERY,
        nodes: Callable[[], Iterable[Mapping[str, float]]] | None = None,
    ):
        self.dg, self.log, self.every = dg, log, float(every)
        self._nodes = nodes or cluster_resources
        self.names = [n for n, node in dg.graph.nodes.items() if node.auto_actors]
        self.added: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self._next = time.monotonic() + self.every
        self._serving = {name: self._count_serving(name) for name in self.names}

    def _count_serving(self, name: str) -> int:
        actors = getattr(self.dg, "node_actors", None)
        return len(actors()[name]) if actors is not None else self.dg.replicas(name)

    def _joined(self) -> None:
        """Say the replicas that joined since the last poll (they now get rows)."""
        for name in self.names:
            self.dg.replicas(name)  # lets the started replicas join
            serving = self._count_serving(name)
            if serving > self._serving.get(name, serving):
                self.log.info(
                    "node %r: %d new replica(s) joined; %d serving (num_actors: auto)",
                    name,
                    serving - self._serving[name],
                    serving,
                )
            self._serving[name] = serving

    def poll(self, *, force: bool = False) -> dict[str, int]:
        """Read the cluster (at most every ``every`` seconds unless ``force``) and start or
        remove replicas; returns node → its replicas now."""
        if not self.names:
            return {}
        self._joined()  # replicas that finished starting join at every poll
        now = time.monotonic()
        if not force and now < self._next:
            return {}
        self._next = now + self.every
        try:
            nodes = self._nodes()
        except Exception:  # no node table this time: nothing changes
            return {}
        out = {}
        for name in self.names:
            node = self.dg.graph.nodes[name]
            target = actor_slots(actor_demand(node, name), nodes)
            have = self.dg.replicas(name)
            if target > have:
                started = self.dg.add_replicas(name, target - have)
                self.added[name] = self.added.get(name, 0) + started
                self.log.info(
                    "node %r: %d replica(s) started for the cluster's new slots (num_actors: "
                    "auto, %d now)",
                    name,
                    started,
                    have + started,
                )
            elif target < have:
                gone = self.dg.drop_replicas(name, have - max(target, 1))
                if gone:
                    self.dropped[name] = self.dropped.get(name, 0) + gone
                    self.log.info(
                        "node %r: %d replica(s) still starting stopped: the cluster shrank "
                        "(num_actors: auto, %d now)",
                        name,
                        gone,
                        have - gone,
                    )
            out[name] = self.dg.replicas(name)
        return out
