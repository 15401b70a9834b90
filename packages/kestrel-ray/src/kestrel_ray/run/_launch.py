"""``launch``: train every estimator of a graph while simulations keep arriving.

This module opens the run (:class:`~kestrel_ray.run._session.RunSession`: everything about the
config is checked before Ray starts), then the driver log, Ctrl-C and timeout, the progress
reporter and Ray; :class:`~kestrel_ray.run._launcher.Launcher` runs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ._launcher import Launcher
from ._logging import driver_logger
from ._progress import make_progress
from ._result import RunResult
from ._session import RunSession
from ._stop import StopControl

__all__ = ["launch"]


def launch(
    config: Any,
    run_dir: str | os.PathLike[str],
    *,
    overrides: Iterable[str] = (),
    seed: int | None = None,
    timeout: float | None = None,
    address: str | None = None,
    auto_sample: bool = True,
    progress: Any = None,
) -> RunResult:
    """Train the graph's estimators with adaptive re-simulation; save; sample the posterior.

    Args:
        config: a YAML path, a mapping, an OmegaConf config or a :class:`kestrel_core.RunConfig`
            (never modified). Ignored when ``run_dir`` already holds a ``config.yml``: then the
            run is continued with that config (and its saved weights, if any).
        run_dir: the run directory (created).
        overrides: dotlist overrides (``"graph.theta.estimator.max_epochs=10"``).
        seed: the run's seed; ``None`` draws fresh entropy (recorded in the result and in
            ``status.json``).
        timeout: seconds after which the run stops gracefully, as on Ctrl-C.
        address: Ray cluster to join (default: ``RAY_ADDRESS``, else a local Ray). A Ray
            already running in this process is used as it is.
        auto_sample: draw ``sample.posterior.n`` (and ``sample.ppd.n``) samples at the end.
        progress: ``None`` (live table on a terminal, log lines otherwise), ``False``, a number
            of seconds between log lines, or an object with ``start``/``update``/``stop``.

    Returns:
        A :class:`RunResult` (status ``"completed"`` or ``"interrupted"``).

    Raises:
        ConfigError, GraphError: the config is invalid (before Ray starts).
        RunError: a node failed during the run (status ``"failed"`` in ``status.json``; every
            actor of the run was killed).
        KeyboardInterrupt: a second Ctrl-C (status ``"aborted"``).
    """
    session = RunSession.for_launch(config, run_dir, overrides=overrides, seed=seed)
    session.create()
    with driver_logger(session.run, console=progress is not False) as log:
        if session.config_from_run:
            log.info("run %s: continuing with its config.yml", session.run.root)
        reporter = make_progress(progress, log)
        with StopControl(timeout) as stop, session.ray(address, log):
            launcher = Launcher(
                session, stop=stop, log=log, on_progress=reporter.update, auto_sample=auto_sample
            )
            reporter.start()
            try:
                return launcher.run()
            finally:
                reporter.stop()
