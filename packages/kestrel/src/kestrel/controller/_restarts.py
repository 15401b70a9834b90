"""Crashed node actors, as the driver of a launch sees them: counted, logged, logs reopened.

A simulator node's actor is restarted by Ray after its process dies (``max_restarts``, see
:mod:`kestrel_ray.cluster._resources`) and the call it was running is retried with the same seeds, so
the run goes on and draws the same numbers. Ray does this silently; :class:`RestartWatch`
makes it visible: it reads each actor's restart count from Ray's actor table (kept by the
cluster's control store, the GCS: it survives the actor; one read per poll for all the
launch's actors, :func:`~kestrel_ray.node._timeout.actor_infos`), and for every new restart

* logs a warning on the driver's log (``node 'x': actor (replica 0) restarted after a crash
  (restart 1 of at most 3); the call it was running is retried``),
* adds it to ``restarts`` (node → count) — the launch's
  :attr:`~kestrel.RunResult.restarts`, written to ``status.json``,
* reopens the restarted actor's log collection (``RunNodeWrapper.open_log``: the new process
  collects nothing until told to).

A replica whose Ray node was lost (its machine, raylet or object store died) is said so,
naming that node: Ray restarts it on a remaining node that offers what it requests, retries
the calls it was running with the same seeds, and rebuilds from the same seeds the blocks
whose only copy was in the lost node's object store. A replica that no remaining node can take
waits in Ray for ever; after :data:`RESTART_WAIT` seconds the watch raises a
:class:`~kestrel_core.SimulatorError` naming the node, the replica and the lost Ray node, and
the launch stops as after any failure (buffer and weights saved; ``kestrel launch -o RUN``
continues it once a node offers the resources again).

Estimator nodes are never restarted (a fresh actor would drop the training state): their death
ends the launch (:mod:`._failure`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import ray

from kestrel_core import SimulatorError
from kestrel_ray.internal import actor_info, actor_infos

__all__ = ["RestartWatch", "actor_restarts", "RESTART_WAIT"]

#: seconds between two reads of the actor table
POLL_EVERY = 1.0
#: seconds a restarted replica may wait for a node to run on before the launch stops
#: (``KESTREL_RESTART_WAIT``)
RESTART_WAIT = float(os.environ.get("KESTREL_RESTART_WAIT", "120"))


def _alive_nodes() -> set[str] | None:
    try:
        return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    except Exception:  # no node table: nothing to say about lost nodes
        return None


def _key(actor: Any) -> Any:
    """An actor's identity (its id; the handle itself where it has none)."""
    ident = getattr(actor, "_actor_id", None)
    return ident.hex() if ident is not None else id(actor)


def actor_restarts(actor: Any) -> int | None:
    """How often Ray restarted ``actor`` (``None``: unknown — no actor table, another Ray).

    Read from Ray's actor table (:func:`~kestrel_ray.node._timeout.actor_info`), the cluster's
    record of the actor, which outlives its processes.
    """
    info = actor_info(actor)
    return int(info["NumRestarts"]) if "NumRestarts" in info else None


class RestartWatch:
    """Counts the restarts of a launch's node actors (see the module docstring).

    Args:
        actors: node → its actors (replica ``i`` at index ``i``).
        log: the driver's logger.
        restarts: node → count, updated in place (the launch's ``RunResult.restarts``).
        max_restarts: node → the restarts Ray allows its actors (for the message).
        every: seconds between two reads of the actor table (:meth:`poll` does nothing sooner).
    """

    def __init__(
        self,
        actors: Mapping[str, Sequence[Any]],
        log: logging.Logger,
        restarts: dict[str, int],
        *,
        max_restarts: Mapping[str, int] | None = None,
        every: float = POLL_EVERY,
    ):
        self._actors = {name: list(group) for name, group in actors.items()}
        self._log = log
        self.restarts = restarts
        self._max = dict(max_restarts or {})
        self._every = float(every)
        self._seen: dict[tuple[str, int], int] = {}
        #: replica → the Ray node it was last seen alive on
        self._node: dict[tuple[str, int], str] = {}
        #: replica → (when it was first seen waiting for a restart, the node it had lost)
        self._waiting: dict[tuple[str, int], tuple[float, str | None]] = {}
        self._next = 0.0

    def track(self, actors: Mapping[str, Sequence[Any]]) -> None:
        """Watch ``actors`` (node → its actors) from now on: a node's replicas changed
        (``num_actors: auto``); what was seen of the actors that stay is kept."""
        old = {
            (name, _key(actor)): i
            for name, group in self._actors.items()
            for i, actor in enumerate(group)
        }
        new = {name: list(group) for name, group in actors.items()}
        remap = {
            (name, old[name, _key(actor)]): (name, j)
            for name, group in new.items()
            for j, actor in enumerate(group)
            if (name, _key(actor)) in old
        }
        for table in (self._seen, self._node, self._waiting):
            entries = list(table.items())
            table.clear()
            table.update({remap[k]: v for k, v in entries if k in remap})  # type: ignore[misc]
        self._actors = new

    def poll(self, *, force: bool = False) -> dict[str, int]:
        """Read every actor's restart count (at most every ``every`` seconds unless ``force``);
        log and count the new restarts. Returns node → restarts so far (nodes with any)."""
        now = time.monotonic()
        if not force and now < self._next:
            return self.restarts
        self._next = now + self._every
        alive: set[str] | None = None
        # one read of the actor table for every actor (not one per actor: the poll's cost
        # does not grow with the replicas)
        every = [
            (name, i, actor)
            for name, group in self._actors.items()
            for i, actor in enumerate(group)
        ]
        for (name, i, actor), info in zip(every, actor_infos([a for _, _, a in every])):
            count = int(info["NumRestarts"]) if "NumRestarts" in info else None
            state = info.get("State")
            node = (info.get("Address") or {}).get("NodeID") or None
            last = self._node.get((name, i))  # before a restart: the node it was on
            if state == "ALIVE":
                self._waiting.pop((name, i), None)
                if node:
                    self._node[name, i] = node
            before = self._seen.get((name, i), 0)
            if count is None or count <= before:
                self._check_waiting(name, i, state, now)
                continue
            self._seen[name, i] = count
            self.restarts[name] = self.restarts.get(name, 0) + count - before
            most = self._max.get(name)
            of_most = f" of at most {most}" if most is not None else ""
            if alive is None:
                alive = _alive_nodes()
            lost = last if last is not None and alive is not None and last not in alive else None
            if state != "ALIVE":
                self._waiting.setdefault((name, i), (now, lost))
            # one line per restart, also for several between two polls (a loaded machine
            # polls late): the log reads the same however fast the driver ran
            for k in range(before + 1, count + 1):
                self._say_restart(name, i, lost, k, of_most)
            reopen = getattr(actor, "open_log", None)
            if reopen is not None:
                reopen.remote()  # the new process collects its log again
        return self.restarts

    def _say_restart(self, name: str, i: int, lost: str | None, count: int, of_most: str) -> None:
        """The driver log's warning of restart ``count`` of replica ``i`` of node ``name``."""
        if lost is not None:
            self._log.warning(
                "node %r: actor (replica %d) lost with Ray node %s (its machine, raylet "
                "or object store died); restarted on a remaining node that offers what "
                "it requests (restart %d%s); the calls it was running are retried with "
                "the same seeds, and its blocks lost with that node rebuilt by Ray from "
                "the same seeds",
                name,
                i,
                lost,
                count,
                of_most,
            )
        else:
            self._log.warning(
                "node %r: actor (replica %d) restarted after a crash (restart %d%s); the "
                "call it was running is retried with the same seeds",
                name,
                i,
                count,
                of_most,
            )

    def _check_waiting(self, name: str, i: int, state: str | None, now: float) -> None:
        """Raise once a restarted replica has waited :data:`RESTART_WAIT` seconds for a node."""
        if (name, i) not in self._waiting:
            return
        if state not in ("RESTARTING", "PENDING_CREATION", "DEPENDENCIES_UNREADY"):
            self._waiting.pop((name, i), None)
            return
        since, lost = self._waiting[name, i]
        if now - since < RESTART_WAIT:
            return
        where = f" after Ray node {lost} was lost" if lost is not None else ""
        raise SimulatorError(
            f"node {name!r}: actor (replica {i}) has waited {now - since:.0f} s for a node to "
            f"restart on{where}: no remaining node offers what it requests (graph.{name}.ray); "
            "add a node that does (ray start --address … --resources …) and continue the run "
            "with `kestrel launch -o RUN`"
        )
