"""Which config a launch uses on a run directory: explicit intent, never a silent choice.

=====================  =================================================================
run directory          launch
=====================  =================================================================
not a run              refused before anything is written or moved: a file, or a folder that
                       holds files but no ``run.json`` (a model folder with the user's
                       ``config.yml``; :func:`kestrel.rundir._folder.check_launch_folder`)
new (no config.yml)    the config given (with overrides) — ``new``
exists, no config      the run's own ``config.yml`` plus overrides of estimator (``graph.<node>.
                       estimator.*``), ``sample.*`` and ``budget.*`` keys — ``resume``; any
                       other key is an error naming it, as for another config
exists, same config    the config given, which equals the run's — ``resume``
exists, other config   an error naming the keys that differ (old → new) and the choices:
``mode="resume"``      the run's own ``config.yml`` plus overrides (the config given is ignored,
                       with a warning naming the keys: :mod:`._launch_notes`)
``mode="restart"``     old contents moved to ``RUN/previous/N/``; the config given (or, without
                       one, the run's own) plus overrides — ``restart``
=====================  =================================================================

"Same" compares the configs as the run records them (:func:`kestrel.rundir._config.
run_config_changes`): where the run, the code and the data files lie does not count; the
observations are compared by value, the code by the files the targets import
(:func:`kestrel.rundir._code.code_changes`: another ``model.py`` is ``paths.imports``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from kestrel.rundir._code import code_changes
from kestrel.rundir._config import run_config_changes
from kestrel.rundir._folder import check_launch_folder, check_restart_keeps
from kestrel.rundir._rundir import PREVIOUS_DIR, RunDir
from kestrel.rundir._runfiles import check_resume_files
from kestrel.rundir._trust import config_trust
from kestrel_core import ConfigError, KestrelError, RunConfig, load_config
from kestrel_core.internal import Change, describe_changes

__all__ = ["launch_plan", "MODES", "differs_message"]

#: the ``mode`` argument of :func:`~kestrel.launch`
MODES = ("auto", "resume", "restart")
_TARGETS = ("simulator", "estimator")


def launch_plan(
    config: Any, run: RunDir, overrides: Sequence[str], mode: str = "auto"
) -> tuple[RunConfig, str]:
    """The config a launch on ``run`` uses, and how it treats the directory.

    Args:
        config: a YAML path, mapping, OmegaConf config or RunConfig; ``None``: the run's own.
        run: the run directory.
        overrides: dotlist overrides (applied to whichever config is used).
        mode: ``"auto"``, ``"resume"`` or ``"restart"`` (see the module docstring).

    Returns:
        ``(config, how)``, ``how`` one of ``"new"``, ``"resume"``, ``"restart"``.

    Raises:
        ConfigError: an unknown mode; ``run`` is a file or a folder that is not a run but
            holds files (any mode, before anything is read or moved); ``--restart`` of a run
            that holds the code folder of its new config; no config for a new run; in
            ``"auto"`` mode a config
            that differs from the run's own (:func:`differs_message`); or as
            :func:`~kestrel_core.load_config`.
        RunFileError: (a ConfigError) a resume whose ``config.yml``, observation copy,
            ``run.json``, ``saved.json`` or ``buffer.npz`` is empty or damaged (names the file
            and the remedy; nothing is written).
        GraphError: as :func:`~kestrel_core.load_config`.
    """
    if mode not in MODES:
        raise ConfigError(f"launch: mode must be one of {', '.join(MODES)}; found {mode!r}")
    check_launch_folder(run.root, mode)  # never a folder of files Kestrel did not write
    if not run.has_config():
        if config is None:
            raise ConfigError(
                "launch: give a config (path, mapping or RunConfig) or an existing run directory"
            )
        return _load(config, run, overrides), "new"
    if mode == "resume":
        return _resumable(run.load_config(overrides, check_targets=_TARGETS), run), "resume"
    if mode == "auto" and config is None:
        cfg = run.load_config(overrides, check_targets=_TARGETS)
        if overrides:  # only training and sampling settings change without --resume
            recorded = run.load_config(check_targets=(), trust=True)  # compared, never built
            changes = run_config_changes(recorded, cfg, run.root) + code_changes(recorded, cfg)
            changed = [c for c in changes if not _training_key(c.key)]
            if changed:
                raise ConfigError(differs_message(run, changed))
        return _resumable(cfg, run), "resume"
    if mode == "restart":
        if config is None:
            cfg = run.load_config(overrides, check_targets=_TARGETS)
        else:
            cfg = _load(config, run, overrides)
        check_restart_keeps(run.root, cfg.paths.imports)
        return cfg, "restart"
    cfg = _load(config, run, overrides)
    try:
        recorded = run.load_config(check_targets=(), trust=True)  # compared, never built
    except KestrelError as err:
        raise ConfigError(
            f"{run.config_file}: the run's own config cannot be read ({err}); launch with "
            f"--restart (Python: mode='restart') to move the old run to "
            f"{os.path.join(run.root, PREVIOUS_DIR)}/N/ and start afresh"
        ) from err
    changes = run_config_changes(recorded, cfg, run.root) + code_changes(recorded, cfg)
    if changes:
        raise ConfigError(differs_message(run, changes))
    return _resumable(cfg, run), "resume"


def _resumable(cfg: RunConfig, run: RunDir) -> RunConfig:
    """``cfg``, once the files a resume continues from read back (``run.json``, each node's
    ``saved.json``, the buffer snapshot's table of contents): a damaged one is refused here,
    before anything is written or Ray starts (:func:`~kestrel.rundir._runfiles.
    check_resume_files`)."""
    check_resume_files(RunDir(run.root, cfg), cfg.graph.latents)
    return cfg


def _training_key(key: str) -> bool:
    """An estimator's, the sampling's or the budget's setting (``graph.<node>.estimator.*``,
    ``sample.*``, ``budget.*``): what a resume may change by override without ``--resume``."""
    parts = key.split(".")
    return parts[0] in ("sample", "budget") or (
        len(parts) > 3 and parts[0] == "graph" and parts[2] == "estimator"
    )


def _load(config: Any, run: RunDir, overrides: Sequence[str]) -> RunConfig:
    trust, origin = config_trust(config)  # a run folder's config.yml is that run's
    return load_config(
        config, overrides, run_dir=run.root, check_targets=_TARGETS, trust=trust, origin=origin
    )


def differs_message(run: RunDir, changes: Sequence[Change]) -> str:
    """The one-paragraph error of a launch whose config differs from the run's own."""
    keys = "1 key differs" if len(changes) == 1 else f"{len(changes)} keys differ"
    return (
        f"{run.root} was launched with another config; {keys} from its config.yml "
        f"(old → new): {describe_changes(changes)}. Choose: --resume to continue this run with "
        f"its own config.yml (plus any key=value overrides; Python: mode='resume'), or "
        f"--restart to move its contents to {os.path.join(run.root, PREVIOUS_DIR)}/N/ and "
        f"start afresh with the new config (Python: mode='restart')."
    )
