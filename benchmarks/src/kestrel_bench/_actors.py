"""Actor classes of the benchmarks (plain classes; ``ray.remote`` is applied where they start).

* :class:`NaiveNode`: the previous system's simulator actor on pre-simulated arrays — per-sample
  ``ray.put`` of its outputs, per-sample resolution of its conditions.
* :class:`ResolveProbe`: Kestrel's real :class:`~kestrel_ray.NodeWrapper` with one extra method
  that times its condition resolution (``NodeWrapper._resolve``, the path every sampling call
  takes) inside the actor.

Durations are measured inside the actor with ``time.perf_counter`` and returned with the
result, so a benchmark can report the actor's own time without the call's round trip
(see :func:`kestrel_bench.pedantic_inner`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ray import cloudpickle

from kestrel_core import Graph
from kestrel_ray import NodeWrapper

from ._data import DATA_KEYS, make_samples
from ._naive import naive_resolve, put_per_sample, put_thread_pool

__all__ = ["NaiveNode", "ResolveProbe", "probe_node_blob"]


class NaiveNode:
    """Actor class holding N pre-simulated samples, with the naive boundary operations.

    Args:
        n: number of samples N.
        keys: flat keys of :func:`~kestrel_bench.make_samples` to hold.
        seed: data seed.
    """

    def __init__(self, n: int, keys: Sequence[str] = DATA_KEYS, seed: int = 0):
        samples = make_samples(int(n), seed)
        self._arrays = {key: samples[key] for key in keys}

    def ready(self) -> bool:
        """``True`` once constructed."""
        return True

    def put(self, threads: int = 0) -> list:
        """Turn the held outputs into per-sample refs (:func:`put_per_sample`, or
        :func:`put_thread_pool` with ``threads`` workers).

        Returns:
            ``[refs, seconds]``: flat key → N refs (nested in a list, so Ray hands the refs back
            unresolved), and the time the puts took inside the actor.
        """
        start = time.perf_counter()
        refs = put_thread_pool(self._arrays, threads) if threads else put_per_sample(self._arrays)
        return [refs, time.perf_counter() - start]

    def resolve(self, refs: list) -> tuple[float, tuple[int, ...]]:
        """Resolve one condition given as per-sample refs (:func:`naive_resolve`), timed.

        Returns:
            ``(seconds, shape of the stacked array)``.
        """
        start = time.perf_counter()
        out = naive_resolve(refs)
        return time.perf_counter() - start, out.shape


class ResolveProbe(NodeWrapper):
    """The real NodeWrapper actor, plus :meth:`timed_resolve`.

    Built with :func:`probe_node_blob` (a node conditioned on ``x``).
    """

    async def timed_resolve(
        self, conditions: Mapping[str, list], n: int
    ) -> tuple[float, dict[str, Any]]:
        """Run ``NodeWrapper._resolve(conditions, n)`` — one batched await of the distinct refs,
        broadcast detection, read-only views — and time it.

        Args:
            conditions: condition name → segment list ``[(block_ref, start, stop), …]``.
            n: number of samples of the call.

        Returns:
            ``(seconds, {name: (shape, first row)})``; a broadcast stays ``(1, *D)``.
        """
        start = time.perf_counter()
        arrays = await self._resolve(conditions, n)
        seconds = time.perf_counter() - start
        return seconds, {k: (v.shape, np.array(v[0])) for k, v in arrays.items()}


def probe_node_blob() -> bytes:
    """The pickled node a :class:`ResolveProbe` is built from: ``theta`` with evidence ``x``."""
    graph = Graph()
    graph.add_node("x", {"_target_": "kestrel_bench._data.Replay", "key": "x.value", "rows": 1})
    graph.add_node(
        "theta",
        {"_target_": "kestrel_bench._data.Replay", "key": "theta.value", "rows": 1},
        parents=["x"],
    )
    return cloudpickle.dumps(graph.nodes["theta"])
