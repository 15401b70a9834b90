"""The launch loop as a controller: train every estimator while simulations keep arriving.

A :class:`Launcher` runs one launch on a :class:`~kestrel.session._session.RunSession` as a
controller over the states of :mod:`._states` (the driver handles ObjectRefs only; data moves
between actors and the store). :meth:`Launcher.run` deploys the graph, then advances one
:meth:`Launcher._step` at a time — each does the work of the current state and returns a
:class:`~kestrel.controller._states.Step` (previous state, next state) — until a terminal state:

1. ``Starting`` (phase ``starting``): deploy one actor per node (the driver writes their logs
   into the run directory) and load saved weights (a resume, :mod:`._resume`);
2. ``Restoring`` (phase ``initial simulation``): restore the run's saved buffer and the journal
   beyond it (a resume); without a saved buffer, append ``buffer.initial_samples_path`` if set
   (rows ``kestrel import`` put in the run's ``import/`` folder count as simulations of the
   budget, :mod:`kestrel.importing`), then the rows ``--reuse`` takes from earlier runs' banks
   (counted too, :mod:`kestrel.persist._reuse`);
3. ``InitialSimulation``: simulate the rest of ``min_samples + validation_samples`` from the
   prior, in pieces appended as they are done (:mod:`._prior`; one poll per step); without
   determinism, once every piece is submitted, rounds from the prior queue behind them
   (:meth:`~._rounds.Resimulation.prime`), so the replicas simulate on while training
   starts, and until every estimator has finished an epoch;
4. ``Training(calls, rounds)``: start training on every estimator node, then one poll per step:
   resimulation rounds paced by training epochs and bounded by the simulation budget
   (:mod:`._rounds`, one append in flight); the training calls are polled every ~50 ms, so an
   actor's error surfaces at once; with budget left after training ended, the rest is drawn;
5. ``Stopping`` (Ctrl-C, SIGTERM or timeout): estimators stop after their current step; the
   rounds in flight get :data:`~._stop.STOP_GRACE` seconds, then are abandoned (a stop stops
   in every phase, :mod:`._stop`);
6. ``Saving`` and ``Sampling``: save the buffer and the weights (a resumed node's only when
   this launch made a better model), draw ``sample.posterior.n`` (and ``sample.ppd.n``)
   samples; then ``Finished``.

An exception in any state saves what it can (:func:`~._failure.save_on_failure`, before the
actors are killed) and ends the launch in ``Failed``; a second Ctrl-C in ``Aborted``.

Every append goes through the launcher's :class:`~._appends.Appends`, which hands the rows the
store accepted to the journal (``buffer.journal``, :mod:`kestrel.persist._journal`). Rows with a
NaN or ±inf in any key are counted per node and appended marked invalid: the store keeps them
dead, so training never reads them (a round without a valid row is an error). The polls and
their reports (``status.json``, progress, ``profile.json``): the launcher's
:class:`~kestrel.controller._reporting.LaunchReporter` (:mod:`._reporting`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray

from kestrel.controller._appends import Appends
from kestrel.controller._budget import Budget, check_initial_budget, restore_counts, write_budget
from kestrel.controller._endsample import sample_if_trained
from kestrel.controller._failure import save_on_failure
from kestrel.controller._initial import append_initial_samples
from kestrel.controller._prior import PriorSimulation, piece_size
from kestrel.controller._reporting import LaunchReporter
from kestrel.controller._result import RunResult
from kestrel.controller._resume import Resume, add_epochs
from kestrel.controller._rounds import Resimulation
from kestrel.controller._states import (
    Aborted,
    Ended,
    Failed,
    Finished,
    InitialSimulation,
    LaunchState,
    Phase,
    Restoring,
    RunStatus,
    Sampling,
    Saving,
    Starting,
    Step,
    Stopping,
    Training,
)
from kestrel.controller._stop import StopControl
from kestrel.importing._layout import holds_imported_rows
from kestrel.persist._bank import BankWriter
from kestrel.persist._digest import simulator_digest
from kestrel.persist._journal import JournalWriter
from kestrel.persist._reuse import ReusePlan
from kestrel.preflight._capacity import rounds_in_flight, store_capacity
from kestrel.report._logging import FILE_ONLY
from kestrel.report._profile import LaunchProfile
from kestrel.report._progress import ProgressState
from kestrel.session._ray import cluster_nodes
from kestrel.session._session import RunSession
from kestrel.tracking._tracker import Tracker
from kestrel_core import ConfigError, Graph, KestrelError
from kestrel_ray import DeployedGraph, RefTrace, RunError
from kestrel_ray.internal import describe_failure, unwrap_error

__all__ = ["Launcher", "check_auto_actors"]

_POLL = 0.05  # seconds: how long one ray.wait on the training calls may block


def check_auto_actors(graph: Graph, deterministic: bool) -> None:
    """Refuse ``num_actors: auto`` in a deterministic launch: the replica count cuts each call
    into other chunks, with other seeds, so the run would draw other numbers on a cluster of
    another size (DESIGN.md's determinism contract: bit-identical for a seed).

    Raises:
        ConfigError: naming the first ``auto`` node and the remedy.
    """
    auto = [n for n, node in graph.nodes.items() if node.auto_actors]
    if deterministic and auto:
        raise ConfigError(
            f"graph.{auto[0]}.num_actors: auto: a deterministic launch cannot follow the "
            "cluster's nodes (the replica count cuts the simulations into other chunks, with "
            "other seeds, so the run would not be bit-identical on another cluster); set "
            "num_actors to a number, or launch without deterministic"
        )


class Launcher:
    """One launch: a controller over its states, one :meth:`_step` at a time.

    Every collaborator comes in here, built by :func:`~kestrel.launch` in dependency order;
    what depends on the deployed graph gets it when it is called.

    Args:
        session: the run (config checked, directory created, Ray running).
        stop: the graceful-stop control (Ctrl-C, timeout).
        log: the driver's logger.
        budget: the run's simulation budget (:class:`~kestrel.controller._budget.Budget`).
        resume: what the launch continues from and keeps (:class:`~._resume.Resume`, given
            the same ``budget``).
        result: the launch's result, filled in as it runs (status ``running``).
        profile: the driver's clock (``RUN/profile.json``); ``profile.t_start`` is when this
            launch's own time began (after Ray started).
        on_poll: called with a :class:`ProgressState` and the deployed graph at every poll (at
            most every 0.5 s, and at each phase change); ``None``: nobody listens (the polls
            still update the result and ``status.json``).
        auto_sample: draw ``sample.posterior.n`` (and ``sample.ppd.n``) samples at the end.
        epochs: give every estimator this many epochs more than its saved weights have
            (``max_epochs`` is a total over the run's launches); ``None``: the config's.
        deterministic: train under a deterministic round schedule (:class:`kestrel_core.Rounds`);
            ``None``: the config's ``deterministic`` (``null`` there: false).
        reuse: the rows of earlier runs' banks this launch starts from
            (:func:`~kestrel.persist._reuse.plan_reuse`, checked before anything was written);
            ``None``: none.
        tracker: gets every epoch's ``metrics.csv`` row as well
            (:class:`kestrel.tracking.Tracker`, through the node-log sink); ``None``: none.

    Attributes:
        state: the current :class:`~kestrel.controller._states.LaunchState` (only the run loop
            changes it). phase: its :class:`Phase`.
        dg: the deployed graph while :meth:`run` runs (``None`` before).
        cluster: the Ray cluster's nodes, read once deployed (``status.json``).
        journal: the :class:`~kestrel.persist._journal.JournalWriter` (``None``:
            ``buffer.journal: false``).
        appends: the launch's :class:`~._appends.Appends` (every append, then the journal).
        reporter: the launch's :class:`~kestrel.controller._reporting.LaunchReporter` (polls,
            ``status.json``, the poll callback, ``profile.json``).
    """

    def __init__(
        self,
        session: RunSession,
        *,
        stop: StopControl,
        log: logging.Logger,
        budget: Budget,
        resume: Resume,
        result: RunResult,
        profile: LaunchProfile,
        on_poll: Callable[[ProgressState, Any], None] | None = None,
        auto_sample: bool = True,
        epochs: int | None = None,
        deterministic: bool | None = None,
        reuse: ReusePlan | None = None,
        tracker: Tracker | None = None,
    ):
        if session.config.buffer is None:
            raise ConfigError("buffer: kestrel launch needs a buffer section")
        self.session = session
        self.cfg = session.config
        self.buffer = session.config.buffer
        self.stop = stop
        self.log = log
        self.budget = budget
        self.resume = resume
        self.result = result
        self.profile = profile
        self.t0 = profile.t_start
        self.auto_sample = auto_sample
        self.tracker = tracker
        self.max_epochs = add_epochs(self.cfg, session.run, epochs) if epochs is not None else {}
        det = self.cfg.deterministic if deterministic is None else deterministic
        self.deterministic = bool(det)
        check_auto_actors(self.cfg.graph, self.deterministic)
        self.reuse = reuse
        self.journal = (
            JournalWriter(  # every append kept: the run's simulation bank
                session.run.journal,
                log,
                bank=BankWriter(
                    session.run.journal,
                    simulator_digest(self.cfg, session.run.root),
                    self.cfg.graph.latents,
                ),
            )
            if getattr(self.buffer, "journal", True)
            else None
        )
        self.appends = Appends(result, budget, log, self.journal)
        self.reporter = LaunchReporter(self, on_poll)
        self.state: LaunchState = Starting()
        self.dg: DeployedGraph | None = None
        self.cluster: dict[str, dict[str, float]] = {}

    @property
    def phase(self) -> Phase:
        """The phase of the current state."""
        return self.state.phase

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run every state up to a terminal one; returns the result (status ``completed``,
        ``timeout`` or ``interrupted``).

        Raises:
            RunError: a node failed (``result`` attached; status ``failed`` in ``status.json``).
            KestrelError: a check failed during the run (status ``failed``).
            KeyboardInterrupt: a second Ctrl-C (status ``aborted``).
        """
        self.profile.enter(str(self.phase))
        self.reporter.write_status()
        self.log.info(
            "launch: run %s, seed %d%s, nodes %s, estimators %s, budget %s",
            self.session.run.root,
            self.session.seed,
            " (deterministic)" if self.deterministic else "",
            list(self.cfg.graph.nodes),
            self.cfg.graph.latents,
            "none" if self.budget.total is None else f"{self.budget.total} simulations",
        )
        try:
            reused = self.reuse.rows if self.reuse is not None else 0
            # (launch: before Ray)
            check_initial_budget(self.cfg, self.session.run.snapshots, reused=reused)
            with self.session.deployed(buffer=True, node_logs=True, tracker=self.tracker) as dg:
                try:
                    self.dg = dg
                    self.result.placement = self.session.placement
                    self.cluster = cluster_nodes()
                    for name, count in dg.auto_counts.items():
                        self.log.info(
                            "node %r: num_actors: auto → %d replicas (one per slot of what a "
                            "replica requests over the cluster's nodes; new nodes get more)",
                            name,
                            count,
                        )
                    self.reporter.write_status()
                    while not self.state.terminal:
                        self._set_state(self._step().next)
                except Exception as err:
                    # a failure saves the buffer and the live estimators' weights while the
                    # store and the actors still answer (the session kills them on exit)
                    save_on_failure(dg, self.resume, err, journal=self.journal)
                    raise
        except KeyboardInterrupt:
            self._end(Aborted, RunStatus.ABORTED, "second Ctrl-C")
            raise
        except KestrelError as err:
            self._end(Failed, RunStatus.FAILED, f"{type(err).__name__}: {err}")
            if isinstance(err, RunError):
                err.result = self.result
            raise
        except Exception as err:  # a user exception from a node: add what the driver knows
            self._end(Failed, RunStatus.FAILED, f"{type(err).__name__}: {err}")
            self.log.error("%s", describe_failure(err), exc_info=err, extra=FILE_ONLY)  # full
            raise RunError(describe_failure(err, short=True), result=self.result) from err
        return self.result

    def _step(self) -> Step:
        """One turn of the loop: the work of the current state; returns it and the next."""
        state = self.state
        nxt: LaunchState
        match state:
            case Starting():
                nxt = self._start()
            case Restoring():
                nxt = self._restore()
            case InitialSimulation():
                nxt = self._simulate(state)
            case Training():  # and Stopping
                nxt = self._train(state)
            case Saving():
                nxt = self._save(state)
            case Sampling():
                nxt = self._sample(state)
            case _:
                raise AssertionError(f"the launch loop has no step from {state!r}")
        return Step(state, nxt)

    def _set_state(self, state: LaunchState) -> None:
        """Move to ``state``; entering a new phase starts its part of the profile and reports."""
        previous, self.state = self.state, state
        if not state.terminal and state.phase is not previous.phase:
            self.profile.enter(str(state.phase))
            self.reporter.report(force=True)

    def _end(self, ended: type[Ended], status: RunStatus, reason: str) -> None:
        """End in a failure state (``ended``): the result, ``status.json`` and the profile."""
        self.result.status, self.result.reason = status, reason
        self.result.wall_time = time.monotonic() - self.t0
        state = self.state
        self._set_state(ended(status, state.phase, state.rounds_drawn(), reason))
        self.reporter.write_status()
        self.log.error("launch %s: %s", status, reason.splitlines()[0] if reason else "")
        self.reporter.write_profile({})  # the driver's parts (the actors may be gone)

    def _graph(self) -> DeployedGraph:
        assert self.dg is not None  # run() deployed it before the first step
        return self.dg

    # -- the states' steps ---------------------------------------------------------------------
    def _start(self) -> LaunchState:
        """Starting: load the saved weights (a resume)."""
        if self.max_epochs:
            self.log.info("--epochs: max_epochs per node now %s", self.max_epochs)
        self.result.resumed = self.resume.load_weights(self._graph())
        return Restoring()

    def _restore(self) -> LaunchState:
        """Restoring: the saved buffer and the journal beyond it, else the initial samples on
        disk and the rows reused from earlier runs; the initial simulation's size."""
        dg = self._graph()
        total = self.buffer.min_samples + self.buffer.validation_samples
        loaded = restored = self.resume.restore_buffer(dg)
        self.session.keep_config()  # the buffer fits the new config: a failure keeps it
        if loaded:
            self._restore_budget()
        if self.journal is None:
            self.log.info("journal: off (buffer.journal: false): no simulation bank is kept")
        path = self.buffer.initial_samples_path
        if path and not loaded:
            loaded = append_initial_samples(
                dg, path, lambda trace: self.appends.append(dg.store, trace, "initial samples")
            )
            imported = holds_imported_rows(self.session.run.root, path)
            if imported:  # `kestrel import`ed simulations: they count in the budget
                self.budget.count(loaded)
            self.log.info(
                "initial samples: %d loaded from %s%s",
                loaded,
                path,
                f" (imported: counted as simulations, budget {self.budget.as_status()})"
                if imported
                else "",
            )
            # the counters cover them: imported rows as simulations, any others as none
            write_budget(self.session.run.snapshots, self.budget)
        if self.reuse is not None and not restored:
            loaded += self._reuse_rows(dg)
        left = max(0, total - loaded)
        self.budget.check_initial(left)
        self.log.info(
            "initial simulation: %d samples from the prior%s",
            left,
            "" if loaded else f" (no buffer snapshot in {self.session.run.snapshots})",
        )
        prior = PriorSimulation(
            dg,
            left,
            piece=piece_size(self.buffer, total, deterministic=self.deterministic),
            append=lambda trace: self._append_initial(dg, trace),
            stop=self.stop,
            log=self.log,
        )
        return InitialSimulation(prior, self._resimulation(dg))

    def _reuse_rows(self, dg: DeployedGraph) -> int:
        """The rows of earlier runs' banks (``--reuse``, :mod:`kestrel.persist._reuse`) as
        initial rows: counted as simulations of the budget; returns how many."""
        assert self.reuse is not None
        for note in self.reuse.notes:
            (self.log.warning if self.reuse.sources else self.log.info)("%s", note)
        if not self.reuse.sources:
            return 0
        rows = self.reuse.append(
            dg,
            lambda blocks, origin: self.appends.append_blocks(dg.store, blocks, origin),
            self.log,
        )
        self.budget.count(rows)
        self.log.info(
            "reuse: %d rows of %d earlier run%s as initial rows (counted as simulations, "
            "budget %s)",
            rows,
            len(self.reuse.sources),
            "s" if len(self.reuse.sources) != 1 else "",
            self.budget.as_status(),
        )
        write_budget(self.session.run.snapshots, self.budget)  # the counters cover them
        return rows

    def _restore_budget(self) -> None:
        """A resumed run counts on from the simulations its saved buffer recorded."""
        folder, resume = self.session.run.snapshots, self.resume
        if restore_counts(self.budget, folder, resume.restored, resume.replayed):
            self.log.info("budget: %s (restored)", self.budget.as_status())

    def _simulate(self, state: InitialSimulation) -> LaunchState:
        """InitialSimulation: append the pieces that are done; once every piece is submitted,
        keep rounds from the prior queued behind them (not deterministic); training starts
        once every row is in the store (a stop goes to saving once the pieces in flight are
        done or abandoned, through stopping while rounds from the prior are in flight)."""
        prior, rounds = state.prior, state.rounds
        if prior.done:
            if not self.stop.requested:
                return self._start_training(rounds)
            return Stopping({}, rounds) if rounds.busy else Saving(self.stop.status)
        appended = prior.step(_POLL)
        if prior.submitted and not self.stop.requested:
            rounds.prime(reserved=prior.left)
        if appended:
            self.reporter.report(force=True)
        else:
            self.reporter.report()
        return state

    def _append_initial(self, dg: DeployedGraph, trace: RefTrace) -> None:
        valid = trace.valid_rows()
        self.appends.append(dg.store, trace, "initial simulation")
        self.budget.count(trace.n, 0 if valid is None else int((~valid).sum()))

    def _resimulation(self, dg: DeployedGraph) -> Resimulation:
        """The launch's rounds (drawn from the prior until every estimator has a proposal)."""
        return Resimulation(
            dg,
            self.buffer,
            self.budget,
            deterministic=self.deterministic,
            in_flight=rounds_in_flight(self.buffer, self.session.sample_bytes, store_capacity()),
            append=lambda trace, what: self.appends.submit(dg.store, trace, what),
            finish=self.appends.finish,
            stats=dg.buffer_stats,
            log=self.log,
            proposing=self._proposing,
        )

    def _proposing(self) -> bool:
        """Whether every estimator may have a proposal: not every one reported epoch 0 at the
        latest poll (an estimator that reports no epoch counts as proposing: its rounds are
        never drawn from the prior instead)."""
        epochs = self.result.epochs
        latents = self.cfg.graph.latents
        return not all(m in epochs and int(epochs[m]) < 1 for m in latents)

    def _start_training(self, rounds: Resimulation) -> Training:
        dg = self._graph()
        rounds.start()
        futures = dg.start_training()
        self.log.info(
            "training: started on %s (%s%s)",
            list(futures),
            self.buffer.pace,
            ", deterministic" if self.deterministic else "",
        )
        return Training({ref: node for node, ref in futures.items()}, rounds)

    def _train(self, state: Training) -> LaunchState:
        """Training and Stopping: collect the training calls that ended, react to a stop
        request, finish or start a resimulation round, report; once training ended and no
        round is owed (stopping: once the training calls ended), drain the rounds and save."""
        rounds = state.rounds
        stopping = isinstance(state, Stopping)
        if stopping and not state.calls:  # the rounds in flight: until done, or the grace ends
            if rounds.busy and self.stop.waited_enough():
                rounds.abandon()
            if not rounds.busy:
                return self._drained(rounds)
            rounds.step(training=False, stopping=True)
            time.sleep(_POLL / 5)
            self.reporter.report()
            return state
        if not (state.calls or rounds.busy or rounds.more_after_training()):
            return self._drained(rounds)
        calls = self._poll_training(state.calls)
        if self.stop.requested and not stopping:
            self.log.info(
                "stop: %s; asking the estimators to stop after their current step", self.stop.reason
            )
            self._graph().request_stop()
            stopping = True
        rounds.step(training=bool(calls), stopping=stopping)
        self.reporter.report()
        return Stopping(calls, rounds) if stopping else Training(calls, rounds)

    def _drained(self, rounds: Resimulation) -> Saving:
        rounds.drain()  # the rounds in flight, appended and counted
        return Saving(self.stop.status, rounds.drawn)  # completed, timeout or interrupted

    def _poll_training(self, calls: Mapping[Any, str]) -> dict[Any, str]:
        """Wait up to ~50 ms for the training calls; returns those still running."""
        if not calls:
            time.sleep(_POLL / 5)
            return {}
        refs = list(calls)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=_POLL)
        for ref in done:
            self._training_ended(calls[ref], ref)
        ended = set(done)
        return {ref: node for ref, node in calls.items() if ref not in ended}

    def _training_ended(self, node: str, ref: ray.ObjectRef) -> None:
        try:
            status = ray.get(ref)
        except ray.exceptions.RayError as err:
            self._graph().request_stop()
            cause = unwrap_error(err, node, "train")
            self.result.status = RunStatus.FAILED
            raise RunError(
                f"node {node!r} failed while training: "
                + describe_failure(cause, remote=err, node=node),
                node=node,
                result=self.result,
            ) from err
        estimator = status.get("estimator") or {}
        self.result.epochs[node] = int(estimator.get("epoch", 0))
        self.log.info(
            "node %s: training ended at epoch %s (%s; the best model, used for sampling: epoch %s)",
            node,
            self.result.epochs[node],
            str(estimator.get("ended") or estimator.get("state")).replace("_", " "),
            estimator.get("best_epoch"),
        )

    def _save(self, state: Saving) -> LaunchState:
        """Saving: the buffer snapshot (and ``budget.json``), the weights."""
        dg = self._graph()
        self.resume.save_buffer(dg)  # and budget.json beside it
        if self.journal is not None:
            self.log.info("journal: %s", self.journal.summary())
        self.resume.save_weights(dg, self.reporter.poll_status(timeout=10.0), self.result.epochs)
        self.reporter.report(force=True)
        if self.auto_sample:
            return Sampling(state.status, state.drawn)
        return self._finished(state.status, state.drawn)

    def _sample(self, state: Sampling) -> LaunchState:
        """Sampling: the configured posterior (and PPD) samples."""
        paths = sample_if_trained(
            self._graph(),
            self.cfg,
            self.session.run,
            state.status,
            self.log,
            epochs=self.result.epochs,
            max_epochs=self.max_epochs,
            stop=self.stop,
        )
        self.result.samples.update(paths)
        # a stop during the sampling ends the launch as interrupted (or timeout)
        return self._finished(
            self.stop.status if self.stop.requested else state.status, state.drawn
        )

    def _finished(self, status: RunStatus, drawn: int) -> Finished:
        """The result, ``status.json``, ``profile.json`` and the last log lines."""
        self.result.status = status
        self.result.reason = self.stop.reason
        self.result.wall_time = time.monotonic() - self.t0
        self.reporter.write_status()
        self.reporter.write_profile(self.reporter.poll_status(timeout=10.0))
        r = self.result
        self.log.info(
            "launch %s in %.1f s: epochs %s, %d samples simulated%s",
            status,
            r.wall_time,
            r.epochs,
            r.simulated,
            f", non-finite dropped {r.nonfinite}" if any(r.nonfinite.values()) else "",
        )
        if any(r.errors.values()):
            self.log.info("simulations that raised (skipped, on_error: skip): %s", r.errors)
        return Finished(status, self.phase, drawn, self.stop.reason)
