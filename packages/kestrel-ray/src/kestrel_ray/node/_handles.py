"""Driver-side handles of node actors: the only callers of a node actor's methods.

:class:`NodeHandle` wraps one :class:`~kestrel_ray.NodeWrapper` actor. ``submit`` computes how
many objects the call returns (chunks × fields + one meta dict) and calls the actor with
``.options(num_returns=k)``, so the refs exist immediately, the driver owns every block, and a
downstream node can be called with refs whose values are still being computed. The other
methods (status, training, logs) return ObjectRefs the caller waits on. A node with a
``timeout`` gets one call per chunk instead, so that a chunk that hangs can be named, retried
and failed (:mod:`._timeout`). Two driver-side
helpers call actor methods beside them, each for one job: ``_estimator_files`` (estimator state
as bytes) and ``run._nodelog.NodeLogSink`` (draining logs and metrics rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from kestrel_core import check_count, flat_key
from kestrel_ray._errors import unwrap_error
from kestrel_ray.graph._refs import Column, RefTrace, merge_meta
from kestrel_ray.node._timeout import ChunkCall, wait_chunk

if TYPE_CHECKING:
    from kestrel_ray.store._handle import StoreHandle

__all__ = ["NodeHandle", "Pending", "ActorGroup", "SubmittedTrace", "collect_trace"]


@dataclass
class Pending:
    """The refs of one node call, before its meta dicts are read.

    Attributes:
        node: node name.
        n: number of samples.
        columns: field (``"value"``, ``"log_prob"``) → :class:`Column` of ``n`` rows.
        meta_refs: one ref per actor call to ``{"fields": {field: (D, dtype)}, "nonfinite": int,
            "finite": [bool (c,) per chunk], "findings": [dict, …] (an estimator's, if any)}``.
        chunk_calls: for a node with a ``timeout``: the chunk of each meta ref (one call per
            chunk), waited for with :func:`~kestrel_ray.node._timeout.wait_chunk`; else empty.
    """

    node: str
    n: int
    columns: dict[str, Column] = field(default_factory=dict)
    meta_refs: list[Any] = field(default_factory=list)
    chunk_calls: list[ChunkCall] = field(default_factory=list)


def collect_trace(n: int, calls: Mapping[str, tuple[str, Pending]]) -> RefTrace:
    """Wait for the meta dicts of submitted calls and assemble their trace.

    Args:
        n: number of samples of every call.
        calls: node → ``(method, Pending)``, in submission order.

    Returns:
        :class:`RefTrace` with every field of every call (shape and dtype from the meta dicts,
        non-finite counts and finite-row masks per node, an estimator's findings).

    Raises:
        KestrelError: a node's call failed (its error, naming the node and the call).
        SimulatorError: a chunk of a node with a ``timeout`` hung twice (naming node and chunk).
    """
    trace = RefTrace(n)
    for name, (method, pending) in calls.items():
        try:
            for ref, call in zip(pending.meta_refs, pending.chunk_calls):
                wait_chunk(name, f"{method}({n})", ref, call)
            metas = ray.get(pending.meta_refs)
        except ray.exceptions.RayError as err:
            _consume(pending)
            raise unwrap_error(err, name, f"{method}({n})") from err
        fields = merge_meta([m["fields"] for m in metas], name)
        for fld, col in pending.columns.items():
            key = flat_key(name, fld)
            trace.columns[key] = col
            if fld in fields:
                trace.meta[key] = fields[fld]
        trace.nonfinite[name] = sum(int(m["nonfinite"]) for m in metas)
        trace.errors[name] = sum(int(m.get("errors", 0)) for m in metas)
        first = next((m["error"] for m in metas if m.get("error")), None)
        if first:
            trace.error[name] = (str(first[0]), str(first[1]))
        raised = [np.asarray(r, dtype=bool) for m in metas for r in m.get("raised") or ()]
        if trace.errors[name] and sum(len(r) for r in raised) == n:  # on_error: skip
            trace.raised[name] = np.concatenate(raised)
        found = metas[-1].get("findings") if metas else None  # the latest draw's, as status
        if found:  # what an estimator's observation guards found at these draws
            trace.findings[name] = [dict(f) for f in found]
        masks = [np.asarray(ok, dtype=bool) for m in metas for ok in m.get("finite") or ()]
        if masks and sum(len(ok) for ok in masks) == n:
            trace.finite[name] = np.concatenate(
                masks
            )  # chunks in row order: the store's valid rows
    return trace


def _consume(pending: Pending) -> None:
    """Read the data refs of a failed call: they hold the same error as its meta ref, and Ray
    logs an error ref that is dropped unread as "Unhandled error" with its whole traceback, on
    top of the one message the caller reports. Refs still pending are left alone."""
    refs = list({id(r): r for col in pending.columns.values() for r in col.refs}.values())
    if not refs:
        return
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    for ref in ready:
        try:
            ray.get(ref, timeout=0)
        except Exception:  # the call's own error, already reported through its meta ref
            pass


class ActorGroup:
    """The actors of one node (one actor, or each replica of a multiplexed node) and the calls
    every one of them answers. :class:`NodeHandle` and
    :class:`~kestrel_ray.MultiplexNodeWrapper` each hold one.

    Args:
        actors: the actor handles, replica ``i`` at index ``i``.
    """

    def __init__(self, actors: Sequence[Any]):
        self.actors = list(actors)

    def status_refs(self) -> list[Any]:
        """One ref per actor to its ``status()`` dict."""
        return [actor.status.remote() for actor in self.actors]

    def open_log_refs(self) -> list[Any]:
        """One ref per actor to ``open_log()`` (run actors only, see ``RunNodeWrapper``)."""
        return [actor.open_log.remote() for actor in self.actors]


class NodeHandle:
    """One node actor as the driver sees it.

    Args:
        name: node name.
        actor: the NodeWrapper actor handle.
        fields: method → fields it returns (from the actor's ``ready()``).
        timeout: the node's ``timeout`` (seconds per chunk; ``None``: no limit).
    """

    def __init__(
        self,
        name: str,
        actor: Any,
        fields: Mapping[str, Sequence[str]],
        timeout: float | None = None,
    ):
        self.name = name
        self.actor = actor
        self.fields = {m: tuple(f) for m, f in fields.items()}
        self.timeout = timeout
        self._group = ActorGroup([actor])

    @property
    def actors(self) -> list[Any]:
        """Every actor behind this handle."""
        return list(self._group.actors)

    def status_refs(self) -> list[Any]:
        """One ref per actor to its ``status()`` dict."""
        return self._group.status_refs()

    def open_log_refs(self) -> list[Any]:
        """One ref per actor to ``open_log()`` (run actors only, see ``RunNodeWrapper``)."""
        return self._group.open_log_refs()

    def train_ref(self, store: StoreHandle) -> ray.ObjectRef:
        """Start ``train(store)`` on the actor; the ref resolves to its final status when
        training ends (or raises the estimator's error)."""
        return self.actor.train.remote(store)

    def request_stop(self) -> None:
        """Ask the estimator to stop after its current step (fire and forget)."""
        self.actor.request_stop.remote()

    def submit(
        self,
        method: str,
        n: int,
        conditions: Mapping[str, Column],
        chunks: Sequence[int],
        seeds: Sequence[Any] | None = None,
    ) -> Pending:
        """Call ``method`` for ``n`` samples; returns at once with the result refs.

        Args:
            method: ``"sample"``, ``"sample_posterior"`` or ``"sample_proposal"``.
            n: number of samples (0 makes no call).
            conditions: condition node → column of 1 (broadcast) or ``n`` rows.
            chunks: chunk sizes summing to ``n``; one block per chunk and field comes back.
            seeds: one ``SeedSequence`` per chunk, or ``None`` (the actor spawns its own).

        Raises:
            CountError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        fields = self.fields[method]
        if n == 0:
            return Pending(self.name, 0, {f: Column() for f in fields})
        if self.timeout is not None:
            return self._submit_chunks(method, n, conditions, chunks, seeds)
        payload = {name: col.payload() for name, col in conditions.items()}
        k = len(chunks) * len(fields) + 1
        refs = (
            getattr(self.actor, method)
            .options(num_returns=k)
            .remote(n, payload, list(chunks), None if seeds is None else list(seeds))
        )
        refs = list(refs)
        columns = {
            f: Column.whole((refs[i * len(fields) + j], c) for i, c in enumerate(chunks))
            for j, f in enumerate(fields)
        }
        return Pending(self.name, n, columns, [refs[-1]])

    def _submit_chunks(
        self,
        method: str,
        n: int,
        conditions: Mapping[str, Column],
        chunks: Sequence[int],
        seeds: Sequence[Any] | None,
    ) -> Pending:
        """:meth:`submit` as one call per chunk, each with its rows of the conditions."""
        assert self.timeout is not None
        fields = self.fields[method]
        out = Pending(self.name, n, {f: Column() for f in fields})
        start = 0
        for i, c in enumerate(chunks):
            stop = start + int(c)
            payload = {
                name: (col if col.is_broadcast(n) else col.slice(start, stop)).payload()
                for name, col in conditions.items()
            }
            refs = list(
                getattr(self.actor, method)
                .options(num_returns=len(fields) + 1)
                .remote(int(c), payload, [int(c)], None if seeds is None else [seeds[i]])
            )
            for j, f in enumerate(fields):
                out.columns[f] = out.columns[f] + Column.whole([(refs[j], int(c))])
            out.meta_refs.append(refs[-1])
            out.chunk_calls.append(ChunkCall(self.actor, i, start, stop, self.timeout))
            start = stop
        return out


class SubmittedTrace:
    """The calls of a trace, submitted and not yet collected (:meth:`DeployedGraph.submit_from_proposal`).

    Attributes:
        n: number of samples.
    """

    def __init__(self, n: int, calls: dict[str, tuple[str, Pending]]) -> None:
        self.n = int(n)
        self._calls = calls
        refs = [ref for _, pending in calls.values() for ref in pending.meta_refs]
        self._refs = refs
        # a node with a timeout is watched for hangs while its chunks are waited for
        self.watched = any(pending.chunk_calls for _, pending in calls.values())

    def ready(self) -> bool:
        """Every call has finished (or failed): :meth:`collect` does not wait."""
        if not self._refs:
            return True
        done, _ = ray.wait(self._refs, num_returns=len(self._refs), timeout=0)
        return len(done) == len(self._refs)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every call; returns :meth:`ready`."""
        if not self._refs:
            return True
        done, _ = ray.wait(self._refs, num_returns=len(self._refs), timeout=max(0.0, timeout))
        return len(done) == len(self._refs)

    def waiting(self) -> list[str]:
        """The nodes whose calls have not all finished, in submission order (empty once
        :meth:`ready`); a call queued on an actor behind another counts as not finished."""
        out = []
        for name, (_, pending) in self._calls.items():
            refs = pending.meta_refs
            if refs:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                if len(done) < len(refs):
                    out.append(name)
        return out

    def collect(self) -> RefTrace:
        """The trace (waits for the calls; raises a node's failure, as :meth:`DeployedGraph.run`)."""
        if self.n == 0:
            return RefTrace(0)
        return collect_trace(self.n, self._calls)
