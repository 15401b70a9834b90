"""``MultiplexNodeWrapper``: one node served by several NodeWrapper replicas.

It lives on the driver, not in an actor: it only cuts row ranges and condition columns, which
needs no data, and the replicas' blocks stay owned by the driver that made the calls (an
intermediate actor would become their owner and take them down with it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kestrel_core import check_count
from kestrel_ray.graph._refs import Column, split_chunks
from kestrel_ray.node._handles import ActorGroup, NodeHandle, Pending

__all__ = ["MultiplexNodeWrapper"]


class MultiplexNodeWrapper:
    """Split each call of one node over ``k`` replicas.

    ``[0, n)`` is cut at ``int(i·n/k)``; replicas whose slice is empty are not called
    (``sample(3)`` over 4 replicas makes 3 calls, ``sample(0)`` none). Per-sample condition
    columns are sliced to each replica's rows; broadcast columns go whole. Each chunk carries its
    own seed, so replicas draw from distinct streams.

    Args:
        name: node name.
        replicas: one :class:`NodeHandle` per replica (same fields).
    """

    def __init__(self, name: str, replicas: Sequence[NodeHandle]):
        self.name = name
        self.replicas = list(replicas)
        self.fields = self.replicas[0].fields
        self._group = ActorGroup([r.actor for r in self.replicas])

    @property
    def actors(self) -> list[Any]:
        """Every replica actor."""
        return list(self._group.actors)

    def add(self, replica: NodeHandle) -> None:
        """A replica joins (``num_actors: auto``, a node joined): the calls submitted from now
        on split their rows over it too."""
        self.replicas.append(replica)
        self._group.actors.append(replica.actor)

    def remove(self, replica: NodeHandle) -> None:
        """A replica leaves (``num_actors: auto``, its node lost): no call is submitted to it
        any more."""
        self.replicas.remove(replica)
        self._group.actors = [r.actor for r in self.replicas]

    def status_refs(self) -> list[Any]:
        """One ref per replica to its ``status()`` dict."""
        return self._group.status_refs()

    def open_log_refs(self) -> list[Any]:
        """One ref per replica to ``open_log()`` (run actors only, see ``RunNodeWrapper``)."""
        return self._group.open_log_refs()

    def slices(self, n: int) -> list[tuple[int, int, int]]:
        """``(replica, start, stop)`` for the replicas that get rows of an ``n``-sample call."""
        k = len(self.replicas)
        edges = [int(i * n / k) for i in range(k)] + [n]
        return [(i, a, b) for i, (a, b) in enumerate(zip(edges, edges[1:])) if b > a]

    def submit(
        self,
        method: str,
        n: int,
        conditions: Mapping[str, Column],
        chunks: Sequence[int],
        seeds: Sequence[Any] | None = None,
    ) -> Pending:
        """As :meth:`NodeHandle.submit`, spread over the replicas; columns come back in row order.

        Raises:
            CountError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        out = Pending(self.name, n, {f: Column() for f in self.fields[method]})
        starts = [sum(chunks[:i]) for i in range(len(chunks))]
        for i, a, b in self.slices(n):
            sub_chunks = split_chunks(chunks, a, b)
            sub_seeds = None  # grid not cut at this replica's rows: the replica seeds its chunks
            if seeds is not None and sub_chunks == [
                c for s, c in zip(starts, chunks) if a <= s < b
            ]:
                sub_seeds = [sd for s, sd in zip(starts, seeds) if a <= s < b]
            sub = {
                name: (col if col.is_broadcast(n) else col.slice(a, b))
                for name, col in conditions.items()
            }
            part = self.replicas[i].submit(method, b - a, sub, sub_chunks, sub_seeds)
            for f, col in part.columns.items():
                out.columns[f] = out.columns[f] + col
            out.meta_refs.extend(part.meta_refs)
            out.chunk_calls.extend(part.chunk_calls)
        return out
