"""``launch``: train every estimator of a graph while simulations keep arriving.

This module takes the run's lock (:class:`~kestrel.rundir._lock.RunLock`: one launch writes a
run folder at a time, from before anything is written until the launch ends), opens the run
(:class:`~kestrel.session._session.RunSession`: everything about the config is checked before
Ray starts), then the driver log, Ctrl-C and timeout, the progress
reporter and Ray; :class:`~kestrel.controller._launcher.Launcher` runs it. It builds the
launch's collaborators in dependency order and hands each what it needs when it is made — the
budget, the :class:`~kestrel.controller._resume.Resume` that writes it beside every snapshot,
the result, the poll callback (:class:`~kestrel.controller._watch.LaunchWatch`: progress,
restarts, checkpoints), the profile, the config's experiment trackers
(:class:`~kestrel.tracking.LaunchTracking`) — so nothing is rewired afterwards.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kestrel.controller._budget import Budget, check_initial_budget
from kestrel.controller._launcher import Launcher, check_auto_actors
from kestrel.controller._result import RunResult
from kestrel.controller._resume import Resume
from kestrel.controller._states import RunStatus
from kestrel.controller._stop import StopControl
from kestrel.controller._watch import LaunchWatch
from kestrel.persist._reuse import plan_reuse
from kestrel.preflight._capacity import check_run_disk
from kestrel.preflight._launch_notes import check_epochs_overrides
from kestrel.report._logging import driver_logger
from kestrel.report._profile import LaunchProfile
from kestrel.report._progress import Progress, make_progress
from kestrel.rundir._folder import check_launch_folder
from kestrel.rundir._intent import MODES
from kestrel.rundir._lock import RunLock
from kestrel.rundir._rundir import RunDir
from kestrel.rundir._trust import trust_keyword
from kestrel.session._session import RunSession
from kestrel.tracking._launch import LaunchTracking, check_tracking
from kestrel_core import ConfigError
from kestrel_core.internal import DiskFullError
from kestrel_ray.internal import check_address_format

__all__ = ["launch"]


@trust_keyword
def launch(
    config: Any,
    run_dir: str | os.PathLike[str],
    *,
    overrides: Iterable[str] = (),
    seed: int | None = None,
    timeout: float | None = None,
    address: str | None = None,
    auto_sample: bool = True,
    progress: Progress | bool | float | None = None,
    mode: str = "auto",
    epochs: int | None = None,
    deterministic: bool | None = None,
    trust: bool = False,
    reuse: Iterable[str | os.PathLike[str]] | str | os.PathLike[str] = (),
) -> RunResult:
    """Train the graph's estimators with adaptive re-simulation; save; sample the posterior.

    Args:
        config: a YAML path, a mapping, an OmegaConf config or a :class:`kestrel_core.RunConfig`
            (never modified). On a run directory that holds a ``config.yml``: ``None`` resumes
            the run with that config; a config that equals it resumes too; one that differs
            is an error unless ``mode`` says what to do.
        run_dir: the run directory (created). Nothing inside it refers to it by an absolute
            path, so a copy or a moved run directory works where it is. The launch holds the
            run's lock (``RUN/.kestrel.lock``, :mod:`kestrel.rundir._lock`) from before it
            writes anything until it ends: one launch writes a run at a time.
        overrides: dotlist overrides (``"graph.theta.estimator.max_epochs=10"``).
        seed: the run's seed; ``None`` draws fresh entropy (recorded in the result and in
            ``status.json``).
        timeout: seconds after which the run stops gracefully, as on Ctrl-C.
        address: Ray cluster to join (default: ``RAY_ADDRESS``, else a local Ray). A Ray
            already running in this process is used as it is.
        auto_sample: draw ``sample.posterior.n`` (and ``sample.ppd.n``) samples at the end.
        progress: ``None`` (live table on a terminal, log lines otherwise), ``False``, a number
            of seconds between log lines, or an object with ``start``/``update``/``stop``.
        mode: on an existing run: ``"auto"`` (resume when ``config`` is ``None`` or equals
            the run's config, else raise), ``"resume"`` (the run's own config plus
            ``overrides``; a ``config`` that differs is ignored, with a warning naming the
            keys) or ``"restart"`` (move the old contents to
            ``RUN/previous/N/`` and start afresh with ``config``, or the run's own config when
            it is ``None``). Ignored for a new run directory.
        epochs: train every estimator this many epochs more than its saved weights have
            (``max_epochs`` counts the epochs of every launch); ``None``: the config's. Refused
            together with a ``graph.<node>.estimator.max_epochs`` override.
        deterministic: train under the deterministic round schedule (with a ``seed``: the same
            buffers, weights and samples under any machine load; training waits for each
            round, see :class:`kestrel_core.Rounds`); ``None``: the config's ``deterministic``
            (default false).
        trust: the user trusts the run folder ``run_dir`` (``--trust``): its ``config.yml``
            may name any target. Without it a resume or restart with the run's own config
            (and a ``config`` that is a run folder's ``config.yml``) may use only Kestrel's
            config classes and the run's code folders (:mod:`kestrel.rundir._trust`); a
            ``config`` of the user's own is never restricted.
        reuse: earlier run folders (``--reuse``; relative to the current folder), after the
            config's ``reuse:`` list: a new run starts from the rows of their simulation banks
            whose simulator digest matches this config's, as its initial rows counted in
            ``budget.simulations`` (:mod:`kestrel.persist._reuse`). Refused on a folder that
            holds rows of its own launches (unless ``mode="restart"``).

    Returns:
        A :class:`RunResult` (status ``"completed"``, ``"interrupted"`` (Ctrl-C) or
        ``"timeout"``).

    Raises:
        ConfigError, GraphError: the config or an argument is invalid (before anything is
            written); a ``reuse`` run that is not a run, has no bank, is damaged or was
            simulated with another simulator (naming the folder, the file or the keys); in ``"auto"`` mode, the config differs from the run's own (the message
            names the keys, old → new); ``epochs`` with a ``max_epochs`` override.
        RunLockedError: another launch holds the run's lock (the message names it: host,
            pid, start), before anything is read or written.
        ClusterError: ``address`` (or ``ray.address``, ``RAY_ADDRESS``) is not ``host:port``
            (before anything is written), or no Ray cluster answers there.
        RunError: a node failed during the run (status ``"failed"`` in ``status.json``; every
            actor of the run was killed).
        KeyboardInterrupt: a second Ctrl-C (status ``"aborted"``).
    """
    t_start = time.monotonic()  # RUN/profile.json counts from here
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    check_epochs_overrides(overrides, epochs)  # every argument check before anything is written
    if mode not in MODES:  # (as launch_plan says it) before the lock creates the folder
        raise ConfigError(f"launch: mode must be one of {', '.join(MODES)}; found {mode!r}")
    # one writer per run folder: the lock first (a file or a user's folder refused before it),
    # held until the launch ends, whichever way
    root = RunDir(run_dir).root
    check_launch_folder(root, mode)
    with RunLock(root) as lock:
        try:
            session = RunSession.for_launch(
                config, run_dir, overrides=overrides, seed=seed, mode=mode
            )
        except BaseException:
            for note in lock.notes:  # said here: the session that would log them never came
                print(f"warning: {note}", file=sys.stderr)
            raise
        session.notes[:0] = lock.notes  # a stale lock taken over, no file locks here
        return _launch(
            session,
            lock,
            t_start,
            timeout=timeout,
            address=address,
            auto_sample=auto_sample,
            progress=progress,
            epochs=epochs,
            deterministic=deterministic,
            reuse=[reuse] if isinstance(reuse, (str, os.PathLike)) else list(reuse),
        )


def _launch(
    session: RunSession,
    lock: RunLock,
    t_start: float,
    *,
    timeout: float | None,
    address: str | None,
    auto_sample: bool,
    progress: Progress | bool | float | None,
    epochs: int | None,
    deterministic: bool | None,
    reuse: list[str | os.PathLike[str]],
) -> RunResult:
    """The launch of :func:`launch` on its session, under the run's lock."""
    # the rows of earlier runs' banks: every check before anything is written
    plan = plan_reuse(session.config, session.run, reuse, fresh=session.mode == "restart")
    # a budget smaller than the initial simulation: said before anything is written or started
    check_initial_budget(
        session.config,
        session.run.snapshots,
        fresh=session.mode == "restart",
        reused=plan.rows if plan is not None else 0,
    )
    _check_address(address, session.config.ray)
    det = session.config.deterministic if deterministic is None else deterministic
    check_auto_actors(session.config.graph, bool(det))  # num_actors: auto: before writing
    check_run_disk(session)  # no room for a checkpoint: a warning (or refused) before writing
    check_tracking(session.config.tracking)  # a tracker's package missing: before writing
    session.create(lock)
    launcher: Launcher | None = None
    interrupted = False
    error: BaseException | None = None
    try:
        with driver_logger(
            session.run,
            console=progress is not False,
            level=session.config.logging.get("level"),
        ) as log:
            if session.archived:
                log.info(
                    "run %s: restarted; the old contents are in %s",
                    session.run.root,
                    session.archived,
                )
            elif session.config_from_run:
                log.info("run %s: continuing with its config.yml", session.run.root)
            for note in session.notes:  # a config ignored, rows simulated under other values
                log.warning("%s", note)
                if progress is False:  # no console lines: a warning is still said
                    print(f"warning: {note}", file=sys.stderr)
            reporter = make_progress(progress, log)
            cfg = session.config
            budget = Budget(cfg.budget.simulations, stop_early=cfg.budget.stop_early)
            resume = Resume(session, log, budget=budget)  # budget.json beside every snapshot
            result = RunResult(session.run.root, RunStatus.RUNNING, session.seed, config=cfg)
            # the config's trackers (none: a no-op): epochs from the node-log sink, the rate
            # and budget from the polls; opened by `with`, closed whichever way it ends
            tracking = LaunchTracking(
                cfg,
                session.run.root,
                budget,
                log,
                launch=session.launch_number or 0,
                seed=session.seed,
            )
            # the poll callback: progress (and tracking), then restarts and checkpoints
            watch = LaunchWatch(
                tracking.reporting(reporter.update),
                resume=resume,
                log=log,
                restarts=result.restarts,
                graph=cfg.graph,
            )
            # the stop handlers go in after ray.init, which installs its own SIGTERM handler
            t_ray = time.monotonic()
            with tracking, session.ray(address, log, capture=True), StopControl(timeout) as stop:
                profile = LaunchProfile(time.monotonic())  # the launcher's own time from here
                profile.add("preflight", t_ray - t_start)
                profile.add("ray_start", profile.t_start - t_ray)
                launcher = Launcher(
                    session,
                    stop=stop,
                    log=log,
                    budget=budget,
                    resume=resume,
                    result=result,
                    profile=profile,
                    on_poll=watch,
                    auto_sample=auto_sample,
                    epochs=epochs,
                    deterministic=deterministic,
                    reuse=plan,
                    tracker=tracking if tracking.active else None,
                )
                if launcher.journal is not None:  # a block lost with its node: never a hang
                    launcher.journal.between_waits = lambda: watch.poll_restarts(launcher.dg)
                reporter.start()
                try:
                    result = launcher.run()
                    result.stop_signal = stop.signal
                    return result
                finally:
                    reporter.stop()
    except BaseException as err:
        interrupted = isinstance(err, KeyboardInterrupt)
        error = err
        raise
    finally:
        try:
            session.end_launch(None if launcher is None else launcher.result, interrupted, error)
        except DiskFullError as full:  # run.json: the launch's own error is the one to raise
            if error is None:
                raise
            print(f"kestrel: run.json not updated: {full}", file=sys.stderr, flush=True)


def _check_address(address: str | None, ray_kwargs: Mapping[str, Any] | None) -> None:
    """The form of the address Ray would join (``--address``, else the config's
    ``ray.address``, else ``RAY_ADDRESS``), checked before the run is written; none is used
    when Ray already runs in this process."""
    import ray

    if ray.is_initialized():
        return
    configured = dict(ray_kwargs or {}).get("address")
    for value, source in (
        (address, "--address"),
        (configured, "ray.address (config)"),
        (os.environ.get("RAY_ADDRESS"), "RAY_ADDRESS"),
    ):
        if value:
            check_address_format(str(value), source)
            return
