"""What a launch on an existing run says before it starts: the notes of a resume.

* **rows changed**: ``--resume`` with overrides that change what a buffer row means
  — a node's ``simulator`` section (the prior's ``priors`` too), its ``parents``, a node added
  or removed, the code the targets import — restores rows simulated under the old values;
  the launch warns in one line naming the keys (old → new) and the remedy (``--restart``).
  Estimator, ``sample``, ``buffer`` and ``budget`` keys change no row and say nothing; neither
  does ``observed``: a row is a draw of the model, whatever the observation it was proposed for.
* **config ignored**: ``--resume`` with a ``-c CONFIG`` that differs from the run's
  ``config.yml`` uses the run's own; the launch says so, naming the keys that differ.
* **epochs** : ``--epochs N`` (``N`` more than the saved weights have) together with a
  ``max_epochs`` override (a total) is refused, naming both.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from kestrel.rundir._code import code_changes
from kestrel.rundir._config import run_config_changes
from kestrel.rundir._rundir import RunDir
from kestrel_core import ConfigError, KestrelError, RunConfig, load_config
from kestrel_core.internal import Change, describe_changes

__all__ = ["row_key", "rows_changed_note", "ignored_config_note", "check_epochs_overrides"]


def row_key(key: str) -> bool:
    """Whether a changed config key changes what a buffer row means: ``graph.<node>`` itself
    (added or removed), ``graph.<node>.simulator…``, ``graph.<node>.parents…``, or
    ``paths.imports`` (the code the targets come from)."""
    if key == "paths.imports":
        return True
    parts = key.split(".")
    if parts[0] != "graph" or len(parts) < 2:
        return False
    if len(parts) == 2:
        return True
    return parts[2].split("[")[0] in ("simulator", "parents")


def _has_rows(run: RunDir) -> bool:
    """Whether the run kept rows a resume restores (a buffer snapshot or journal files)."""
    for folder in (run.snapshots, run.journal):
        try:
            if any(not name.startswith(".") for name in os.listdir(folder)):
                return True
        except OSError:
            continue
    return False


def _changes(run: RunDir, recorded: RunConfig, cfg: RunConfig) -> list[Change]:
    return run_config_changes(recorded, cfg, run.root) + code_changes(recorded, cfg)


def rows_changed_note(run: RunDir, cfg: RunConfig) -> str | None:
    """The warning of a resume whose config changes the keys that make its saved rows
    (``None``: none changed, or the run has no saved rows)."""
    if not _has_rows(run):
        return None
    try:
        recorded = run.load_config(check_targets=(), trust=True)  # compared, never built
    except KestrelError:
        return None
    changes = [c for c in _changes(run, recorded, cfg) if row_key(c.key)]
    if not changes:
        return None
    return (
        f"resume: the overrides change what a simulation is (old → new: "
        f"{describe_changes(changes)}), but the buffer and validation rows restored from "
        f"{run.root} were simulated with the old values, and training and the best-model "
        f"choice would mix both; to simulate afresh with the new values, use "
        f"`kestrel launch -o {run.root} --restart` with the same overrides"
    )


def ignored_config_note(
    config: Any, run: RunDir, cfg: RunConfig, overrides: Sequence[str]
) -> str | None:
    """The note of ``--resume`` with a config given: ignored, naming the keys by which it
    differs from the run's (``None``: it equals the run's config, overrides applied alike)."""
    if config is None:
        return None
    how = (
        f"to use it, give its changes as key=value overrides with --resume, or start afresh "
        f"with `kestrel launch -c CONFIG -o {run.root} --restart`"
    )
    try:
        given = load_config(config, list(overrides), run_dir=run.root, check_targets=())
    except KestrelError as err:
        return f"--resume: the config given is ignored (it cannot be read: {err}); {how}"
    changes = _changes(run, cfg, given)
    if not changes:
        return None
    keys = "key" if len(changes) == 1 else "keys"
    return (
        f"--resume: the config given is ignored (it differs from {run.config_file} in "
        f"{len(changes)} {keys}, old → new: {describe_changes(changes, limit=4)}); "
        f"{run.root} continues with its own config.yml; {how}"
    )


def _override_key(item: str) -> str:
    return item.split("=", 1)[0].strip().lstrip("+~")


def check_epochs_overrides(overrides: Sequence[str], epochs: int | None) -> None:
    """Refuse ``--epochs`` together with a ``max_epochs`` override.

    Raises:
        ConfigError: naming both.
    """
    if epochs is None:
        return
    for item in overrides:
        key = _override_key(item)
        parts = key.split(".")
        if len(parts) == 4 and parts[0] == "graph" and parts[2:] == ["estimator", "max_epochs"]:
            raise ConfigError(
                f"--epochs {epochs} and the override {item} both set how long to train; give "
                f"one: --epochs N trains N epochs more than the saved weights have, "
                f"{key}=M sets the total over the run's launches (recorded in config.yml)"
            )
