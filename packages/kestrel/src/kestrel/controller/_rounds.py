"""The driver's side of the resimulation rounds: when one is drawn, how many samples, the budget.

Rounds are paced by training (:class:`kestrel_core.Rounds`): round ``k`` is drawn once every
estimator node has fixed its proposal for it (at epoch ``k·E`` of its training call), fewer
than two rounds are in flight (one when deterministic), ``buffer.simulate_interval`` seconds
have passed since
the previous round began (a minimum spacing, 0 by default; not used when deterministic, where
training waits for each round, so a spacing would only stall it) and the budget has simulations
left. The round draws ``simulate_count`` latents (fewer: what the budget has left, or — with
``simulate_when_full: false`` — what the buffer can take), simulates the rest of the graph
and appends; then every estimator hears that round ``k`` is in the store.

Without determinism two rounds may be in flight: a round's calls are submitted without waiting
for them (:meth:`~kestrel_ray.DeployedGraph.submit_from_proposal`), its trace is collected and
appended once its calls are done, and the next round is drawn as soon as it is due — its calls
queue on the node actors behind the current round's, so a simulator replica that finishes its
part of one round starts on the next at once. Two is the bound (backpressure: a slow simulator
never has more than one round waiting behind the one it runs). Deterministic launches,
graphs with a node ``timeout`` (whose hang watch waits for each call), and buffers whose blocks
and three rounds would not fit the object store (a second round in flight would make Ray spill,
:func:`~kestrel.preflight._capacity.rounds_in_flight`) keep one round at a time.

When the budget is spent, or the launch stops, the estimators hear that no more rounds come.
A stopping launch gives the rounds in flight :data:`~kestrel.controller._stop.STOP_GRACE`
seconds, then abandons those whose calls still run (:meth:`Resimulation.abandon`: their rows
are never stored). A round whose calls run for long is reported
(:class:`~kestrel.controller._stall.StallWatch`): a hung simulator without a node ``timeout``
is visible.
Training goes on past ``max_epochs`` while a budget's rounds still come, and ends only once
the last round's rows were in an epoch (``kestrel_torch``'s training loop), so every budgeted
simulation reaches training; with ``simulate_when_full: false`` a round that finds the buffer
full ends the rounds (what is left could not be trained on), and a stop ends them at once.
After training ended with budget left otherwise (``budget.stop_early: true``, or
``max_epochs`` 0), the rest of the budget is drawn from the final proposals (one warning), so
a budget is always spent exactly.

Without determinism the replicas are kept fed while no estimator has a proposal yet (before
its first epoch ended, ``proposing``): rounds are drawn from the **prior** instead
(:meth:`Resimulation.prime` submits them while the initial simulation still runs, so their
calls queue behind its pieces and the replicas simulate on while training starts). They are
at most the rounds in flight (two by default) in a launch: enough to cover a first epoch, and
never more of the budget than that spent on the prior instead of on proposals (with a fast
simulator and a slow first epoch, drawing on from the prior until the first epoch ended spent
a small budget on the prior alone). Rows from the prior are
valid training rows for every estimator (their ``log_prob`` is the prior's, the proposal they
came from); they count in the budget as any round's, and go to the bank as the initial
simulation's (``from_prior``). They are not rounds of the estimators' schedule (no round index).

A deterministic launch draws exactly the rounds its training fixed: a round whose proposal was
fixed at the last epoch (training ended right after) is drawn whether the driver saw it before
or after the training call returned — once training ended the driver asks each estimator
whether it fixed the next round (:meth:`Resimulation.step`), so the rows a run ends with never
depend on when the driver polled.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from kestrel.controller._budget import Budget
from kestrel.controller._stall import StallWatch
from kestrel_core import BufferConfig
from kestrel_core.internal import forward_plan
from kestrel_ray import DeployedGraph, RunError
from kestrel_ray.internal import SubmittedTrace, describe_failure, unwrap_error

__all__ = ["Resimulation"]


@dataclass
class _Round:
    """A round drawn: its calls (``submitted``), then its append once collected."""

    k: int
    rows: int
    submitted: SubmittedTrace
    append: ray.ObjectRef | None = None  # the append's ref, once the trace is collected
    invalid: int = 0
    what: str = "resimulation"  # the append's name: its origin in the bank


class Resimulation:
    """The rounds of one launch's training phase.

    Args:
        dg: the deployed graph.
        buffer: the buffer config (``simulate_count``, ``epochs_per_round``,
            ``simulate_interval``, ``simulate_when_full``, ``max_samples``).
        budget: the run's budget (updated as rows reach the store).
        deterministic: the estimators train under a deterministic schedule (one round in
            flight).
        in_flight: the most rounds in flight otherwise (2; 1 where two rounds' blocks would
            not fit the object store, :func:`~kestrel.preflight._capacity.rounds_in_flight`).
        append: ``append(trace, what)`` → the append's ref (the launcher counts non-finite rows;
            ``what``: ``"resimulation round k"`` or, after training ended, ``"end-of-budget
            draws round k"``, the rows' origin in the bank, :mod:`kestrel.persist._bank`).
        finish: ``finish(ref)`` → rows kept, once the append is done.
        stats: ``stats()`` → the store's counts (for ``simulate_when_full: false``).
        log: the driver's logger.
        proposing: ``proposing()`` → whether every estimator has a proposal (finished an
            epoch); while it is False, and not deterministic, up to ``in_flight`` rounds are
            drawn from the prior (see the module docstring). ``None``: never from the prior.

    Attributes:
        prior_drawn: rounds drawn from the prior (:meth:`prime`, or while not ``proposing``).
    """

    def __init__(
        self,
        dg: DeployedGraph,
        buffer: BufferConfig,
        budget: Budget,
        *,
        deterministic: bool,
        in_flight: int = 2,
        append: Callable[[Any, str], Any],
        finish: Callable[[Any], int],
        stats: Callable[[], dict[str, int]],
        log: logging.Logger,
        proposing: Callable[[], bool] | None = None,
    ):
        self.dg, self.buffer, self.budget = dg, buffer, budget
        self.deterministic = deterministic
        self._append, self._finish, self._stats, self.log = append, finish, stats, log
        self.round = 0  # the last round drawn (its index: rounds may be skipped)
        self.drawn = 0  # rounds drawn
        self._ready: dict[str, Any] | None = None  # node → ref: is round self.round + 1 ready
        self._pending: deque[_Round] = deque()  # rounds in flight, oldest first
        self._depth = 1 if deterministic else max(1, int(in_flight))
        self._next = 0.0
        self._closed = False
        self._warned = False
        self._interval = float(buffer.simulate_interval)
        self._watch = StallWatch(log, "resimulation")
        self.abandoned = 0  # rows of rounds abandoned after a stop
        self._asked_fixed = False  # deterministic: asked, after training, for a fixed round
        self._proposing = None if deterministic else proposing
        self.prior_drawn = 0
        self._prior_rounds = self._depth  # the most rounds from the prior (module docstring)
        self._started = False  # start() told the estimators their schedule

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Give the estimators their schedule (call before training starts)."""
        self._started = True
        self.dg.configure_rounds(
            int(self.buffer.epochs_per_round),
            deterministic=self.deterministic,
            open=self.budget.holds_training,
        )
        if self.budget.spent:
            self.close("the simulation budget is spent", last=0)
        if self.deterministic and self._interval:
            self.log.warning(
                "deterministic: buffer.simulate_interval (%g s) is not used; training waits for "
                "each round, so rounds follow the epochs alone (deterministic: false keeps it)",
                float(self.buffer.simulate_interval),
            )
            self._interval = 0.0
        self._next = time.monotonic() + self._interval

    def close(self, why: str, last: int | None = None) -> None:
        """No more rounds after round ``last`` (``None``: stopping): tell the estimators (once)."""
        if not self._closed:
            self._closed = True
            self.dg.close_rounds(last)
            self.log.info(
                "rounds: no more (%s); %d rounds drawn (the last: round %d)%s",
                why,
                self.drawn,
                self.round,
                f"; {self.prior_drawn} more from the prior before a proposal existed"
                if self.prior_drawn
                else "",
            )

    @property
    def busy(self) -> bool:
        """A round is in flight (simulating or appending)."""
        return bool(self._pending)

    @property
    def in_flight(self) -> int:
        """Rows of the rounds drawn that have not reached the store."""
        return sum(r.rows for r in self._pending)

    def more_after_training(self) -> bool:
        """Rounds are still owed once every estimator's training ended: budget left, or
        (deterministic) the estimators have not yet been asked whether training fixed a round
        that was not drawn."""
        return self._budget_left() or (
            self.deterministic and not self._closed and not self._asked_fixed
        )

    def _budget_left(self) -> bool:
        """Rounds are owed to the budget (``budget.stop_early`` or not: training may end before
        the budget is spent, never the budget's rounds)."""
        return not self._closed and self.budget.total is not None and not self.budget.spent

    def _fixed_in_training(self) -> bool:
        """Deterministic, training ended: whether every estimator fixed round ``round + 1``'s
        proposal at one of its epochs (asked once; the answer is at once)."""
        if not self.deterministic or self._closed or self._asked_fixed:
            return False
        self._asked_fixed = True
        self._ready = None  # asked during training: resolves once training ends, fixed or not
        refs = self.dg.round_ready_refs(self.round + 1, marked=True)
        try:
            answers = [int(v) for v in ray.get(list(refs.values()))]
        except ray.exceptions.RayError:
            return False  # an estimator's actor is gone: the launch learns it elsewhere
        return bool(answers) and all(a >= self.round + 1 for a in answers)

    # -- one turn ------------------------------------------------------------------------------
    def step(self, *, training: bool, stopping: bool) -> None:
        """Finish a done append; draw the next round when it is due.

        Args:
            training: some estimator is still training.
            stopping: the launch is stopping (no new rounds).
        """
        self._advance(wait=False)
        if stopping:
            self.close("the launch is stopping")
            return
        if len(self._pending) >= self._depth or self._closed:
            return
        if training and time.monotonic() < self._next:  # no spacing once training ended
            return
        if training and self._proposing is not None and not self._proposing():
            # no proposal yet: keep the replicas fed from the prior, up to the rounds in flight
            if self.prior_drawn < self._prior_rounds:
                self._draw_prior()
            return
        if not training and not self._budget_left():
            if self._fixed_in_training():  # fixed at the last epoch, not drawn yet
                self._draw(self.round + 1, True)
            return
        if self._ready is None:
            self._ready = self.dg.round_ready_refs(self.round + 1)
        refs = list(self._ready.values())
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if len(done) < len(refs):
            return
        rounds = self._ready_rounds()
        self._ready = None
        self._draw(max(rounds.values(), default=self.round + 1), training)

    def _ready_rounds(self) -> dict[str, int]:
        assert self._ready is not None  # step() asked
        out = {}
        for node, ref in self._ready.items():
            try:
                out[node] = int(ray.get(ref))
            except ray.exceptions.RayError as err:
                cause = unwrap_error(err, node, "round_ready")
                raise RunError(
                    f"node {node!r} failed: " + describe_failure(cause, remote=err, node=node),
                    node=node,
                ) from err
        return out

    def _draw(self, k: int, training: bool) -> None:
        self._next = time.monotonic() + self._interval
        self.round = k
        self.drawn += 1
        size = self._size()
        n = self.budget.take(size, reserved=self.in_flight)
        if not training and n and not self._warned:
            self._warned = True
            self.log.warning(
                "budget: training ended with %d simulations of the budget left; drawing them "
                "from the final proposal (they stay in the buffer for a later launch, e.g. "
                "with --epochs N)",
                self.budget.left,
            )
        if n == 0:  # nothing to simulate this round (the buffer is full): it is in the store
            # simulate_when_full: false and a full buffer with budget left: the rest of the
            # budget could not be trained on, so no more rounds come (training, which goes on
            # past max_epochs while a budget's rounds come, may end)
            full = size == 0 and not self.buffer.simulate_when_full and self._budget_left()
            self.dg.round_appended(k, last=full)
            if full:
                self.close("the buffer is full (simulate_when_full: false)", last=k)
            return
        submitted = self.dg.submit_from_proposal(n)
        what = f"{'resimulation' if training else 'end-of-budget draws'} round {k}"
        self._pending.append(_Round(k, int(n), submitted, what=what))
        if submitted.watched:  # a node's hang watch waits for its calls: one round at a time
            self._depth = 1
            self._collect(self._pending[-1])

    def prime(self, reserved: int) -> None:
        """Before training starts (not deterministic, no estimator with a proposal): append
        the prior rounds that are done, and draw more from the prior up to the rounds in
        flight, so the replicas have calls queued while training starts; ``reserved``: rows
        of the budget already promised (the initial simulation's, not yet in the store). A
        no-op once :meth:`start` ran, and where no round is drawn from the prior."""
        if self._started or self._proposing is None or self._proposing():
            return
        self._advance(wait=False)
        while len(self._pending) < self._depth and self._draw_prior(reserved):
            pass

    def _draw_prior(self, reserved: int = 0) -> bool:
        """Draw a round from the prior (:func:`forward_plan`); False if no row may be drawn
        (the budget promised, or the buffer full with ``simulate_when_full: false``)."""
        n = self.budget.take(int(self.buffer.simulate_count), reserved=self.in_flight + reserved)
        if n and not self.buffer.simulate_when_full:
            n = min(n, self._size(reserved))
        if n == 0:
            return False
        self._next = time.monotonic() + self._interval
        self.prior_drawn += 1
        submitted = self.dg.submit(n, forward_plan(self.dg.graph))
        # no round index: it is no round of the estimators' schedule (appended as round
        # ``self.round``, which they already know of); in the bank, rows from the prior
        self._pending.append(_Round(self.round, int(n), submitted, what="initial simulation"))
        if submitted.watched:  # a node's hang watch waits for its calls: one round at a time
            self._depth = 1
            self._collect(self._pending[-1])
        return True

    def _size(self, reserved: int = 0) -> int:
        count = int(self.buffer.simulate_count)
        if self.buffer.simulate_when_full:
            return count
        training = int(self._stats().get("training", 0)) + self.in_flight + int(reserved)
        return max(0, min(count, int(self.buffer.max_samples) - training))

    def drain(self) -> None:
        """Wait for the rounds in flight (if any) and account for them, oldest first."""
        self._advance(wait=True)

    def abandon(self) -> None:
        """Give up the rounds whose calls still run (a stopping launch, after its grace):
        their rows are never stored (the session kills the actors that run them); rounds
        already handed to the store are finished and counted."""
        self._advance(wait=False)
        while self._pending and self._pending[0].append is not None:
            self._advance_head()
        if not self._pending:
            return
        rows = sum(r.rows for r in self._pending)
        nodes = sorted({m for r in self._pending for m in r.submitted.waiting()})
        self.log.warning(
            "rounds: %d round%s in flight abandoned (%d samples; the calls of %s still ran "
            "after the stop; their rows are not stored)",
            len(self._pending),
            "s" if len(self._pending) != 1 else "",
            rows,
            ", ".join(f"node {m!r}" for m in nodes) or "the simulators",
        )
        self.abandoned += rows
        self._pending.clear()

    def _advance(self, *, wait: bool) -> None:
        """Collect and append the rounds whose calls are done (every round: ``wait``), in
        order; account for the appends that finished, oldest first."""
        for r in self._pending:
            if r.append is None:
                if not (wait or r.submitted.ready()):
                    if r is self._pending[0]:
                        self._watch.check(r.submitted.waiting, f"round {r.k}")
                    break
                self._collect(r)
        while self._pending:
            head = self._pending[0]
            if head.append is None or not (wait or _ready(head.append)):
                break
            self._advance_head()

    def _advance_head(self) -> None:
        """The oldest round's append is done (or is waited for): count it, tell the estimators."""
        head = self._pending.popleft()
        self._watch.clear()
        self._finish(head.append)
        self.budget.count(head.rows, head.invalid)
        if not self._started:  # a prior round of prime(): the estimators have no schedule yet
            return
        self.dg.round_appended(head.k, last=self.budget.spent)
        if self.budget.spent:
            self.close(f"the simulation budget of {self.budget.total} is spent", last=head.k)

    def _collect(self, r: _Round) -> None:
        """The round's trace (raises its simulation's failure), appended."""
        trace = r.submitted.collect()
        valid = trace.valid_rows()
        r.invalid = 0 if valid is None else int((~valid).sum())
        r.rows = int(trace.n)
        r.append = self._append(trace, r.what)


def _ready(ref: ray.ObjectRef) -> bool:
    done, _ = ray.wait([ref], timeout=0)
    return bool(done)
