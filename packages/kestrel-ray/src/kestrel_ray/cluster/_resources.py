"""Actor options, and resource checks before any actor starts.

Default CPU request: node actors ask for ``num_cpus=0`` unless the node's ``ray`` options say
otherwise. A simulator actor spends most of its life idle or waiting on its parents, and the
example graphs (three to five nodes plus the store) must start on a 2-core machine; with a
CPU request of 1 each, Ray would leave the fourth actor pending for ever. The operating system
shares the cores among running simulators; set ``ray: {num_cpus: 1}`` (or more) on heavy nodes
to make Ray spread or limit them on a cluster.

A request that no node of the cluster can ever meet (``num_gpus: 2`` on a machine without GPUs,
a custom resource nobody offers) fails here within seconds, before any actor is created —
instead of an actor that stays pending. Autoscaling clusters are checked as they are now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import ray

from kestrel_core import ConfigError, Node

__all__ = ["actor_options", "check_resources", "SIMULATOR_RESTARTS"]

_NAMES = {"CPU": "CPUs", "GPU": "GPUs", "memory": "bytes of memory"}


#: restarts of a crashed simulator actor (the calls it was running are retried until it is back)
SIMULATOR_RESTARTS = 3


def actor_options(node: Node) -> dict[str, Any]:
    """Ray ``.options()`` for the actors of ``node``: its ``ray`` mapping over the defaults.

    Defaults: ``num_cpus=0`` (see the module docstring). A node without estimator is restarted
    after a crash or the loss of its machine (``max_restarts``, on any node that offers what
    it requests) and the calls it was running are retried (``max_task_retries=-1``: the calls
    wait for the restart, however long Ray takes to declare a lost machine dead, and end with
    the actor's death once its restarts are spent); the driver passes each chunk's seed, so a
    retry draws the same numbers. Retries not 0 also let Ray rebuild the blocks of finished
    calls whose only copy was in a lost node's object store (lineage reconstruction: the call
    runs again with the same seeds). With ``max_task_retries=3`` a lost machine used up the
    retries before Ray had declared it dead and the launch failed. Estimator nodes are not
    restarted: a fresh actor would silently drop the training state.
    """
    opts: dict[str, Any] = {"num_cpus": 0}
    if node.estimator is None:
        opts.update(max_restarts=SIMULATOR_RESTARTS, max_task_retries=-1)
    opts.update(dict(node.ray or {}))
    return opts


def _demand(opts: Mapping[str, Any]) -> dict[str, float]:
    out = {
        "CPU": float(opts.get("num_cpus") or 0),
        "GPU": float(opts.get("num_gpus") or 0),
        "memory": float(opts.get("memory") or 0),
    }
    for name, amount in dict(opts.get("resources") or {}).items():
        out[str(name)] = float(amount)
    return {k: v for k, v in out.items() if v > 0}


def _fmt(amount: float, resource: str) -> str:
    amount_s = f"{amount:g}"
    if resource in _NAMES:
        return f"{amount_s} {_NAMES[resource]}"
    return f"{amount_s} of resource {resource!r}"


def check_resources(requests: Iterable[tuple[str, int, Mapping[str, Any]]]) -> None:
    """Fail fast on resource requests the cluster can never meet.

    Args:
        requests: ``(node name, number of actors, actor options)`` per node.

    Raises:
        ConfigError: one actor asks for more of a resource than any single cluster node has
            ("node 'x' requests 2 GPUs; the cluster has 0"), or all actors together ask for more
            than the whole cluster has.
    """
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", True)]
    total = ray.cluster_resources()
    summed: dict[str, list[tuple[str, int, float]]] = {}
    for name, count, opts in requests:
        for resource, amount in _demand(opts).items():
            best = max((float(r.get(resource, 0)) for r in nodes), default=0.0)
            if amount > best:
                where = "the cluster has" if len(nodes) <= 1 else "the largest cluster node has"
                raise ConfigError(
                    f"node {name!r} requests {_fmt(amount, resource)}; {where} {best:g}"
                )
            summed.setdefault(resource, []).append((name, count, amount))
    for resource, parts in summed.items():
        need = sum(count * amount for _, count, amount in parts)
        have = float(total.get(resource, 0))
        if need > have + 1e-9:
            detail = ", ".join(f"{name}: {count} × {amount:g}" for name, count, amount in parts)
            raise ConfigError(
                f"the graph's actors request {_fmt(need, resource)} in total "
                f"({detail}); the cluster has {have:g}"
            )
