"""A node's ``timeout``: a simulator call that hangs fails, it never stalls the run.

A node with ``timeout: T`` (seconds) gets one actor call per chunk (:meth:`NodeHandle.submit
<kestrel_ray.NodeHandle.submit>`), each described by a :class:`ChunkCall`, so the driver can
tell which chunk hangs. :func:`wait_chunk` waits for a chunk's meta dict, chunk after chunk in
row order (upstream nodes first): when the wait for a chunk begins, everything the chunk waits
for (its parents' rows, the node's earlier chunks) is done, so a chunk that is not done ``T``
seconds later has had at least ``T`` seconds to run. Then:

1. the actor's process is killed (``ray.kill(no_restart=False)``: a simulator stuck in a C
   call or a dead lock cannot be interrupted any other way); Ray restarts the actor and
   retries the calls it was running or had queued, with the same seeds, as after any crash;
2. once the actor is back (Ray's actor table says it is alive after one more restart), the
   chunk has ``T`` seconds again;
3. still not done: :class:`~kestrel_core.SimulatorError` naming the node, the chunk, its rows
   and the timeout.

Simulator nodes only: an estimator node's actor holds the training state, and is never
restarted (the check is :func:`~kestrel_ray.graph._actors.check_deployable`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray

from kestrel_core import SimulatorError

__all__ = ["ChunkCall", "wait_chunk", "actor_info", "actor_infos", "RESTART_WAIT"]

#: seconds to wait for a killed actor to be alive again (a new worker process imports the
#: node's code) before the chunk's second try is timed anyway
RESTART_WAIT = 120.0
_log = logging.getLogger("kestrel_ray")


@dataclass(frozen=True)
class ChunkCall:
    """One chunk's own actor call, for a node with a ``timeout``.

    Attributes:
        actor: the actor running it. index: the chunk's index in the node's call.
        start, stop: its rows in the node's call. timeout: seconds it may take.
    """

    actor: Any
    index: int
    start: int
    stop: int
    timeout: float


def actor_info(actor: Any) -> dict[str, Any]:
    """The actor's entry in Ray's actor table (``State``, ``NumRestarts``, ``Pid``, …); empty when
    unknown. The table is the cluster control store's (GCS) record, readable whatever state the
    actor's process is in; Ray's public state API would need the dashboard."""
    try:
        from ray._private import state

        return dict(state.actors(actor_id=actor._actor_id.hex()) or {})
    except Exception:  # a Ray without this table: the caller falls back to waiting
        return {}


def actor_infos(actors: Sequence[Any]) -> list[dict[str, Any]]:
    """Each actor's entry in Ray's actor table (as :func:`actor_info`), read in **one**
    request to the cluster's control store: the table of this driver's job (the actors it
    started, and those they started), filtered to ``actors``; ``{}`` for an actor the table
    does not hold, every entry ``{}`` when there is no table. One read whatever the number
    of actors (a launch with 128 replicas polls the table once, not 128 times)."""
    if not actors:
        return []
    try:
        from ray._private import state

        job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
        table = state.actors(job_id=job) or {}
    except Exception:  # a Ray without this table: nothing to learn
        return [{} for _ in actors]
    out = []
    for actor in actors:
        ident = getattr(actor, "_actor_id", None)
        out.append(dict(table.get(ident.hex()) or {}) if ident is not None else {})
    return out


def wait_chunk(node: str, what: str, meta_ref: Any, call: ChunkCall) -> None:
    """Wait until the chunk's meta dict is ready; restart a hung actor once (module docstring).

    Args:
        node: the node's name. what: the call, e.g. ``"sample(256)"`` (for messages).
        meta_ref: the chunk call's last return value. call: the chunk.

    Raises:
        SimulatorError: the chunk did not finish within ``call.timeout`` seconds on two tries.
    """
    done, _ = ray.wait([meta_ref], timeout=call.timeout)
    if done:
        return
    where = f"node {node!r}: chunk {call.index} of {what} (rows {call.start}:{call.stop})"
    before = int(actor_info(call.actor).get("NumRestarts", 0))
    _log.warning(
        "%s did not finish within its timeout of %g s; restarting the actor to retry it",
        where,
        call.timeout,
    )
    ray.kill(call.actor, no_restart=False)
    _wait_restarted(call.actor, before)
    done, _ = ray.wait([meta_ref], timeout=call.timeout)
    if done:
        return
    ray.kill(call.actor, no_restart=False)  # free the process that hangs again
    raise SimulatorError(
        f"{where} did not finish within its timeout of {call.timeout:g} s, twice (the actor "
        "was restarted and the chunk retried with the same seed); the simulator hangs on "
        "these inputs, or needs a larger `timeout` node option"
    )


def _wait_restarted(actor: Any, before: int) -> None:
    deadline = time.monotonic() + RESTART_WAIT
    while time.monotonic() < deadline:
        info = actor_info(actor)
        if not info:
            return  # nothing to learn: time the retry from now
        if info.get("State") == "DEAD":
            return  # out of restarts: the call's error comes from Ray
        if info.get("State") == "ALIVE" and int(info.get("NumRestarts", 0)) > before:
            return
        time.sleep(0.05)
