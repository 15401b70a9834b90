"""The initial simulation: ``min_samples + validation_samples`` rows from the prior, in pieces.

The rows are drawn in pieces of :func:`piece_size` rows, a function of the config alone (two
launches with one seed draw the same rows, whatever the machine's speed). Without determinism
an initial simulation is at least two pieces, both submitted at once: every replica has a call
queued behind the one it runs (as the resimulation's two rounds in flight), so none waits for
the driver to collect the first piece; a deterministic launch keeps its pieces as they were.
Pieces are submitted ahead, up to :data:`AHEAD_ROWS` rows, so their calls queue on the node
actors and a simulator replica that finishes one piece starts on the next at once; each piece
is collected and appended (and journaled) as soon as its calls are done, oldest first. So the
rows of an initial simulation reach the store as they are made: a stop request (Ctrl-C,
SIGTERM, ``--timeout``) keeps every piece that finished, the launch saves them with the
buffer, and the resume simulates only the rest.

After a stop request the pieces in flight get :data:`~kestrel.controller._stop.STOP_GRACE`
seconds to finish; the calls still running then are abandoned (their rows are never stored;
the session kills their actors when the launch ends). A call that has run for a long time is
reported (:class:`~kestrel.controller._stall.StallWatch`), so a hung simulator without a node
``timeout`` is visible.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kestrel.controller._stall import StallWatch
from kestrel.controller._stop import StopControl
from kestrel_core import BufferConfig
from kestrel_core.internal import forward_plan
from kestrel_ray import DeployedGraph, RefTrace
from kestrel_ray.internal import SubmittedTrace

__all__ = ["PriorSimulation", "piece_size", "AHEAD_ROWS", "MAX_PIECES"]

#: rows submitted ahead of the store: the most an initial simulation holds in flight
AHEAD_ROWS = 4096
#: an initial simulation is cut into at most about this many pieces (fewer for small ones)
MAX_PIECES = 64


def piece_size(buffer: BufferConfig, total: int, *, deterministic: bool = True) -> int:
    """Rows per piece of an initial simulation of ``total`` rows: a round's
    ``simulate_count``, at least ``total / MAX_PIECES`` (the overhead of a piece stays small)
    and at most :data:`AHEAD_ROWS`; not ``deterministic``: at most half of ``total`` (two
    pieces in flight at least, the second queued behind the first on every replica)."""
    least = math.ceil(max(0, int(total)) / MAX_PIECES)
    size = max(1, min(AHEAD_ROWS, max(int(buffer.simulate_count), least)))
    if not deterministic:
        size = max(1, min(size, math.ceil(max(0, int(total)) / 2)))
    return size


@dataclass
class _Piece:
    rows: int
    submitted: SubmittedTrace
    first: int  # the piece's first row in the initial simulation


class PriorSimulation:
    """The pieces of one initial simulation.

    Args:
        dg: the deployed graph.
        left: rows to simulate.
        piece: rows per piece (:func:`piece_size`).
        append: ``append(trace)`` → rows kept (the launch's append, then journal and budget).
        stop: the launch's stop control.
        log: the driver's logger.
    """

    def __init__(
        self,
        dg: DeployedGraph,
        left: int,
        *,
        piece: int,
        append: Callable[[RefTrace], Any],
        stop: StopControl,
        log: logging.Logger,
    ):
        self.dg, self.stop, self.log = dg, stop, log
        self._append = append
        self._piece = max(1, int(piece))
        self._unsubmitted = max(0, int(left))
        self._submitted_rows = 0
        self._pending: deque[_Piece] = deque()
        self._watch = StallWatch(log, "initial simulation")
        self.abandoned = 0  # rows whose calls were abandoned after a stop

    @property
    def left(self) -> int:
        """Rows not yet appended (submitted or not)."""
        return self._unsubmitted + sum(p.rows for p in self._pending)

    @property
    def submitted(self) -> bool:
        """Every piece submitted (or a stop was requested: no more will be)."""
        return self._unsubmitted == 0 or self.stop.requested

    @property
    def done(self) -> bool:
        """Every row appended (or, after a stop, abandoned)."""
        return not self._pending and (self._unsubmitted == 0 or self.stop.requested)

    def step(self, poll: float = 0.05) -> int:
        """Submit pieces up to :data:`AHEAD_ROWS` ahead (none after a stop), append the
        pieces whose calls are done, oldest first; wait up to ``poll`` seconds for the oldest.
        After a stop, pieces still running :data:`STOP_GRACE` s after it are abandoned.

        Returns:
            Rows appended by this step.

        Raises:
            KestrelError: a node's call failed (as :meth:`~kestrel_ray.DeployedGraph.run`).
        """
        if not self.stop.requested:
            self._submit()
        appended = 0
        while self._pending:
            head = self._pending[0]
            if not head.submitted.ready() and not self._wait(head, poll):
                break
            self._pending.popleft()
            self._watch.clear()
            appended += head.rows
            self._append(head.submitted.collect())
            poll = 0.0  # the next piece only if it is done already
        if self._pending and self.stop.waited_enough():
            self._abandon()
        return appended

    def _submit(self) -> None:
        plan = forward_plan(self.dg.graph)
        while self._unsubmitted and sum(p.rows for p in self._pending) < AHEAD_ROWS:
            n = min(self._piece, self._unsubmitted)
            submitted = self.dg.submit(n, plan)
            self._pending.append(_Piece(n, submitted, self._submitted_rows))
            self._unsubmitted -= n
            self._submitted_rows += n

    def _wait(self, head: _Piece, poll: float) -> bool:
        """Wait up to ``poll`` s for the oldest piece; note a call that runs for long."""
        if head.submitted.watched:  # a node with a timeout: its hang watch waits (bounded)
            return True
        if poll > 0 and head.submitted.wait(poll):
            return True
        self._watch.check(head.submitted.waiting, f"rows {head.first}:{head.first + head.rows}")
        return False

    def _abandon(self) -> None:
        rows = sum(p.rows for p in self._pending)
        nodes = sorted({m for p in self._pending for m in p.submitted.waiting()})
        self.log.warning(
            "initial simulation: %d samples abandoned (the calls of node%s %s still ran %g s "
            "after the stop; their rows are not stored)",
            rows,
            "s" if len(nodes) != 1 else "",
            ", ".join(repr(m) for m in nodes) or "?",
            self.stop.grace,
        )
        self.abandoned += rows
        self._pending.clear()
