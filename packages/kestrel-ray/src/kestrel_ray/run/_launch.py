"""``launch``: train every estimator of a graph while simulations keep arriving.

This module checks the config and sets the run up (run directory, driver log, Ctrl-C and
timeout, Ray); :mod:`kestrel_ray._loop` runs it. Everything about the config is checked before
Ray starts (K17): ``load_config(..., check_targets=("simulator", "estimator"))`` and
:func:`~kestrel_ray._preflight.preflight`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from kestrel_core import ConfigError, RunConfig, load_config, seed_sequence

from ._loop import Launcher
from ._preflight import preflight
from ._progress import make_progress
from ._result import RunError, RunResult
from ._rundir import RunDir
from ._session import driver_logger, ray_for_run
from ._stop import StopControl

__all__ = ["launch", "RunResult", "RunError"]


def _resolve_config(config: Any, run: RunDir, overrides: Iterable[str]) -> tuple[RunConfig, bool]:
    """The run's config (``RUN/config.yml`` when it exists) and whether it came from there."""
    resumed_config = run.has_config()
    source = run.config_file if resumed_config else config
    if source is None:
        raise ConfigError("launch: give a config (path, mapping or RunConfig) or an existing run directory")
    cfg = load_config(source, overrides, run_dir=run.root, check_targets=("simulator", "estimator"))
    if cfg.buffer is None:
        raise ConfigError("buffer: kestrel launch needs a buffer section (min_samples, max_samples, "
                          "validation_samples)")
    if not cfg.graph.latents:
        raise ConfigError("graph: no node has an estimator; kestrel launch trains estimators (use "
                          "`kestrel simulate` for forward simulation only)")
    preflight(cfg)
    return cfg, resumed_config


def launch(config: Any, run_dir: str | os.PathLike[str], *, overrides: Iterable[str] = (),
           seed: int | None = None, timeout: float | None = None, address: str | None = None,
           auto_sample: bool = True, progress: Any = None) -> RunResult:
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
    run = RunDir(run_dir)
    cfg, resumed_config = _resolve_config(config, run, overrides)
    run = RunDir(run.root, cfg)
    run.makedirs()
    if not resumed_config:
        run.write_config(cfg)
    root = seed_sequence(seed)
    launcher = Launcher(cfg, run, int(root.entropy), auto_sample=auto_sample)
    with driver_logger(run, console=progress is not False) as log:
        launcher.log = log
        if resumed_config:
            log.info("run %s: continuing with its config.yml", run.root)
        with StopControl(timeout) as stop, ray_for_run(address, cfg.ray, log):
            return launcher.run(stop, make_progress(progress, log))
