"""The launch loop: train every estimator while simulations keep arriving.

A :class:`Launcher` runs one launch on a :class:`~kestrel.session._session.RunSession` through
its :class:`~kestrel.controller._states.Phase` s (the driver handles ObjectRefs only; data moves
between actors and the store):

1. ``STARTING``: deploy one actor per node (the driver writes their logs into the run
   directory) and load saved weights (a resume, :mod:`._resume`);
2. ``INITIAL_SIMULATION``: restore the run's saved buffer and the journal beyond it (a
   resume); from then on every append is journaled (``buffer.journal``, :mod:`._journal`);
   without a saved buffer, append ``buffer.initial_samples_path`` if set, then simulate the
   rest of ``min_samples + validation_samples`` from the prior, in chunks;
3. ``TRAINING``: start training on every estimator node, then one :meth:`Launcher._step` at a
   time: resimulation rounds paced by training epochs and bounded by the simulation budget
   (:mod:`._rounds`, one append in flight); poll training calls every ~50 ms, so an actor's
   error surfaces at once; with budget left after training ended, the rest is drawn;
4. ``STOPPING`` (Ctrl-C, SIGTERM or timeout): estimators stop after their current step;
5. ``SAVING`` and ``SAMPLING``: save the buffer and the weights (a resumed node's only when
   this launch made a better model), draw ``sample.posterior.n`` (and ``sample.ppd.n``) samples.

Rows with a NaN or ±inf in any key are counted per node and appended marked invalid: the store
keeps them dead, so training never reads them (a round without a valid row is an error).
The polls and their reports (``status.json``, progress, ``profile.json``): the launcher's
:class:`~kestrel.controller._reporting.LaunchReporter` (:mod:`._reporting`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray

from kestrel.controller._budget import Budget, check_initial_budget, restore_counts, write_budget
from kestrel.controller._endsample import sample_at_end
from kestrel.controller._initial import append_initial_samples
from kestrel.controller._reporting import LaunchReporter
from kestrel.controller._result import RunResult
from kestrel.controller._resume import Resume, add_epochs
from kestrel.controller._rounds import Resimulation
from kestrel.controller._skipped import count_errors
from kestrel.controller._states import Phase, RunStatus
from kestrel.controller._stop import StopControl
from kestrel.preflight._capacity import rounds_in_flight, store_capacity
from kestrel.report._logging import FILE_ONLY
from kestrel.report._profile import LaunchProfile
from kestrel.report._progress import ProgressState
from kestrel.session._ray import cluster_nodes
from kestrel.session._session import RunSession
from kestrel_core import ConfigError, KestrelError
from kestrel_ray import RunError
from kestrel_ray.internal import describe_failure, unwrap_error

__all__ = ["Launcher", "INITIAL_CHUNK"]

#: rows per call of the initial prior simulation
INITIAL_CHUNK = 4096
_POLL = 0.05  # seconds: how long one ray.wait on the training calls may block


class Launcher:
    """One launch: its phases in order, the training loop one :meth:`_step` at a time.

    Args:
        session: the run (config checked, directory created, Ray running).
        stop: the graceful-stop control (Ctrl-C, timeout).
        log: the driver's logger.
        on_progress: called with a :class:`ProgressState` at every poll (at most every 0.5 s,
            and at each phase change); ``None``: nobody listens (the polls still update the
            result and ``status.json``).
        auto_sample: draw ``sample.posterior.n`` (and ``sample.ppd.n``) samples at the end.
        epochs: give every estimator this many epochs more than its saved weights have
            (``max_epochs`` is a total over the run's launches); ``None``: the config's.
        deterministic: train under a deterministic round schedule (:class:`kestrel_core.Rounds`);
            ``None``: the config's ``deterministic`` (``null`` there: false).

    Attributes:
        reporter: the launch's :class:`~kestrel.controller._reporting.LaunchReporter` (polls,
            ``status.json``, the progress callback, ``profile.json``).
    """

    def __init__(
        self,
        session: RunSession,
        *,
        stop: StopControl,
        log: logging.Logger,
        on_progress: Callable[[ProgressState], None] | None = None,
        auto_sample: bool = True,
        epochs: int | None = None,
        deterministic: bool | None = None,
    ):
        if session.config.buffer is None:
            raise ConfigError("buffer: kestrel launch needs a buffer section")
        self.session = session
        self.cfg = session.config
        self.buffer = session.config.buffer
        self.stop = stop
        self.log = log
        self.auto_sample = auto_sample
        self.resume = Resume(session, log)
        self.max_epochs = add_epochs(self.cfg, session.run, epochs) if epochs is not None else {}
        self.result = RunResult(
            session.run.root, RunStatus.RUNNING, session.seed, config=session.config
        )
        self.phase = Phase.STARTING
        self.dg: Any = None
        self.t0 = time.monotonic()
        self.profile = LaunchProfile(self.t0)  # RUN/profile.json (launch() adds what came before)
        self.cluster: dict[str, dict[str, float]] = {}
        self._first_append: float | None = None  # when this launch's first simulation began
        self._training: dict[Any, str] = {}  # training call ref → node
        det = self.cfg.deterministic if deterministic is None else deterministic
        self.deterministic = bool(det)
        budget = self.cfg.budget
        self.budget = Budget(budget.simulations, stop_early=budget.stop_early)
        self.resume.budget = self.budget  # written beside every buffer snapshot
        self.resim: Resimulation | None = None
        self.reporter = LaunchReporter(self, on_progress)

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run every phase; returns the result (status ``completed`` or ``interrupted``).

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
            check_initial_budget(self.cfg, self.session.run.snapshots)  # (launch: before Ray)
            with self.session.deployed(buffer=True, node_logs=True) as dg:
                self.dg = dg
                self.result.placement = self.session.placement
                self.cluster = cluster_nodes()
                self.reporter.write_status()
                self._resume()
                self._initial_simulation()
                if not self.stop.requested:
                    self._train()
                self._finish()
        except KeyboardInterrupt:
            self._end(RunStatus.ABORTED, "second Ctrl-C")
            raise
        except KestrelError as err:
            self._end(RunStatus.FAILED, f"{type(err).__name__}: {err}")
            if isinstance(err, RunError):
                err.result = self.result
            raise
        except Exception as err:  # a user exception from a node: add what the driver knows
            self._end(RunStatus.FAILED, f"{type(err).__name__}: {err}")
            self.log.error("%s", describe_failure(err), exc_info=err, extra=FILE_ONLY)  # full
            raise RunError(describe_failure(err, short=True), result=self.result) from err
        return self.result

    def _enter(self, phase: Phase) -> None:
        self.phase = phase
        self.profile.enter(str(phase))
        self.reporter.report(force=True)

    def _end(self, status: RunStatus, reason: str) -> None:
        self.result.status, self.result.reason = status, reason
        self.result.wall_time = time.monotonic() - self.t0
        self.reporter.write_status()
        self.log.error("launch %s: %s", status, reason.splitlines()[0] if reason else "")
        self.reporter.write_profile({})  # the driver's parts (the actors may be gone)

    # -- phases --------------------------------------------------------------------------------
    def _resume(self) -> None:
        if self.max_epochs:
            self.log.info("--epochs: max_epochs per node now %s", self.max_epochs)
        self.result.resumed = self.resume.load_weights(self.dg)

    def _initial_simulation(self) -> None:
        self._enter(Phase.INITIAL_SIMULATION)
        total = self.buffer.min_samples + self.buffer.validation_samples
        loaded = self.resume.restore_buffer(self.dg)
        self.session.keep_config()  # the buffer fits the new config: a failure keeps it
        if loaded:
            self._restore_budget()
        self.resume.start_journal(self.dg)
        path = self.buffer.initial_samples_path
        if path and not loaded:
            loaded = append_initial_samples(
                self.dg, path, lambda trace: self._append(trace, "initial samples")
            )
            self.log.info("initial samples: %d loaded from %s", loaded, path)
            write_budget(self.session.run.snapshots, self.budget)  # they are no simulations
        left = max(0, total - loaded)
        self.budget.check_initial(left)
        self.log.info(
            "initial simulation: %d samples from the prior%s",
            left,
            "" if loaded else f" (no buffer snapshot in {self.session.run.snapshots})",
        )
        while left > 0 and not self.stop.requested:
            n = min(INITIAL_CHUNK, left)
            trace = self.dg.sample(n)
            valid = trace.valid_rows()
            self._append(trace, "initial simulation")
            self.budget.count(trace.n, 0 if valid is None else int((~valid).sum()))
            left -= n
            self.reporter.report(force=True)

    def _restore_budget(self) -> None:
        """A resumed run counts on from the simulations its saved buffer recorded."""
        folder, resume = self.session.run.snapshots, self.resume
        if restore_counts(self.budget, folder, resume.restored, resume.replayed):
            self.log.info("budget: %s (restored)", self.budget.as_status())

    def _train(self) -> None:
        self.resim = Resimulation(
            self.dg,
            self.buffer,
            self.budget,
            deterministic=self.deterministic,
            in_flight=rounds_in_flight(self.buffer, self.session.sample_bytes, store_capacity()),
            append=lambda trace, what: self._append(trace, what, wait=False),
            finish=self._finish_append,
            stats=self.dg.buffer_stats,
            log=self.log,
        )
        self.resim.start()
        futures = self.dg.start_training()
        self._training = {ref: node for node, ref in futures.items()}
        self.log.info(
            "training: started on %s (%s%s)",
            list(futures),
            self.buffer.pace,
            ", deterministic" if self.deterministic else "",
        )
        self._enter(Phase.TRAINING)
        while self._training or self.resim.busy or self.resim.more_after_training():
            self._step()
            if self.stop.requested and not self._training:
                break
        self.resim.drain()

    def _step(self) -> None:
        """One turn of the training loop: collect ended training calls, react to a stop
        request, finish or start a resimulation round, report."""
        if self._training:
            refs = list(self._training)
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=_POLL)
            for ref in done:
                self._training_ended(self._training.pop(ref), ref)
        else:
            time.sleep(_POLL / 5)
        if self.stop.requested and self.phase is Phase.TRAINING:
            self.log.info(
                "stop: %s; asking the estimators to stop after their current step", self.stop.reason
            )
            self.dg.request_stop()
            self._enter(Phase.STOPPING)
        assert self.resim is not None  # _train made it
        self.resim.step(training=bool(self._training), stopping=self.phase is Phase.STOPPING)
        self.reporter.report()

    def _training_ended(self, node: str, ref: Any) -> None:
        try:
            status = ray.get(ref)
        except ray.exceptions.RayError as err:
            self.dg.request_stop()
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

    def _finish(self) -> None:
        status = self.stop.status  # completed, timeout or interrupted
        self._enter(Phase.SAVING)
        self.resume.save_buffer(self.dg)  # and budget.json beside it
        if self.resume.journal is not None:
            self.log.info("journal: %s", self.resume.journal.summary())
        self.resume.save_weights(
            self.dg, self.reporter.poll_status(timeout=10.0), self.result.epochs
        )
        self.reporter.report(force=True)
        if self.auto_sample:
            self._enter(Phase.SAMPLING)
            self._sample(status)
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

    def _sample(self, status: RunStatus) -> None:
        untrained = [n for n in self.cfg.graph.latents if not self.result.epochs.get(n)]
        if untrained and status is not RunStatus.COMPLETED:
            self.log.info(
                "sampling: skipped; no trained model yet for %s (stopped before the first epoch)",
                ", ".join(repr(n) for n in untrained),
            )
            return
        run = self.session.run
        untrained = [n for n in untrained if not run.has_weights(n)]
        if untrained:  # completed without one epoch (max_epochs: 0): nothing to sample from
            self.log.info(
                "sampling: skipped; no trained model for %s (training ended before the first "
                "epoch: max_epochs %s)",
                ", ".join(repr(n) for n in untrained),
                {n: self._max_epochs(n) for n in untrained},
            )
            return
        paths = sample_at_end(self.dg, self.cfg, self.session.run, status, self.log)
        self.result.samples.update(paths)

    def _max_epochs(self, node: str) -> Any:
        if node in self.max_epochs:
            return self.max_epochs[node]
        kwargs = getattr(self.cfg.graph[node].estimator, "kwargs", None)
        return kwargs.get("max_epochs") if isinstance(kwargs, dict) else None

    # -- appends -------------------------------------------------------------------------------
    def _append(self, trace: Any, what: str, *, wait: bool = True) -> Any:
        """Append a trace (its non-finite rows counted; the store keeps them dead); ``wait=False``
        returns the append's ref (finish it with :meth:`_finish_append`)."""
        if self._first_append is None:
            self._first_append = time.monotonic()
        counts = trace.check_finite(what)
        count_errors(self.result.errors, trace, what, self.log)  # on_error: skip
        if any(counts.values()):
            for node, count in counts.items():
                self.result.nonfinite[node] = self.result.nonfinite.get(node, 0) + count
            valid = trace.valid_rows()
            dropped = 0 if valid is None else int((~valid).sum())
            self.log.warning(
                "%s: dropped %d of %d samples with non-finite values (per node: %s)",
                what,
                dropped,
                trace.n,
                {k: v for k, v in counts.items() if v},
            )
        ref = self.dg.append(trace, wait=False)
        if not wait:
            return ref
        return self._finish_append(ref)

    def _finish_append(self, ref: Any) -> int:
        done = self.dg.store.appended(ref)  # journaled there
        self.budget.covered(done.ids)
        for note in done.notes:
            self.log.warning("buffer: %s", note)
        self.result.simulated += done.kept  # the valid rows: what entered the buffer
        return done.kept
