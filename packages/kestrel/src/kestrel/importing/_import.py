"""``import_simulations``: simulations made elsewhere written into a run as its initial rows.

The run folder (``-o RUN``) is new, empty, or a run that an earlier import wrote and that was
never launched; a launched run is refused (its buffer is filled already: the remedy is a new
folder). Under the run's lock (:class:`~kestrel.rundir._lock.RunLock`, as a launch takes it)
the config is loaded (simulators only: no estimator is built, so neither Ray nor PyTorch is
imported), every simulator dry-run as a launch would, and the rows checked
(:mod:`._rows`). Only then is anything written: ``RUN/import/NNNNNN.npz``, its entry in
``RUN/import/imports.json``, and — for a new run — ``RUN/config.yml`` (relocatable, with
``buffer.initial_samples_path: import``), ``RUN/observations/`` and an empty ``RUN/run.json``,
as a launch writes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kestrel.importing._layout import (
    MANIFEST_FILE,
    import_folder,
    next_import_file,
    read_manifest,
    write_manifest,
)
from kestrel.importing._rows import check_rows
from kestrel.importing._sources import read_sources
from kestrel.preflight._dryrun import dry_run, expected_keys
from kestrel.rundir._code import code_changes
from kestrel.rundir._config import run_config_changes
from kestrel.rundir._folder import RUN_FILE, check_launch_folder
from kestrel.rundir._lock import RunLock
from kestrel.rundir._rundir import RunDir
from kestrel.rundir._trust import config_trust, trust_keyword
from kestrel_core import ConfigError, RunConfig, load_config
from kestrel_core.internal import BUFFER_FILE, describe_changes, save_npz

__all__ = ["import_simulations", "ImportResult"]

#: what import loads of a config: the simulators (the estimators are the launch's)
_TARGETS = ("simulator",)


@dataclass
class ImportResult:
    """What :func:`import_simulations` wrote.

    Attributes:
        run_dir: the run folder. path: the file written (``RUN/import/NNNNNN.npz``).
        rows: rows imported now. total: rows imported into the run so far (this import
            included). shapes: node → per-row shape. new_run: the run folder was created
            (``config.yml`` written) by this import.
        budget: the config's ``budget.simulations`` (``None``: no budget).
        initial: ``buffer.min_samples + buffer.validation_samples`` of the config.
        notes: warnings (a stale lock taken over).
    """

    run_dir: str
    path: str
    rows: int
    total: int
    shapes: dict[str, tuple[int, ...]]
    new_run: bool
    budget: int | None
    initial: int
    notes: list[str] = field(default_factory=list)

    def launch_lines(self) -> list[str]:
        """What the next launch will do with the imported rows, in words."""
        lines = []
        left = max(0, self.initial - self.total)
        lines.append(
            f"the next `kestrel launch -o {self.run_dir}` starts from these {self.total} rows"
            + (f" and simulates {left} more from the prior first" if left else "")
        )
        if self.budget is not None:
            if self.total >= self.budget and left:
                lines.append(
                    f"budget.simulations = {self.budget}: the {self.total} imported rows spend "
                    f"it all, and the initial simulation still needs {left}: the launch will "
                    "refuse to start (raise the budget, or import more rows)"
                )
            elif self.total >= self.budget:
                lines.append(
                    f"budget.simulations = {self.budget}: the {self.total} imported rows spend "
                    "it all; the launch trains without simulating (raise the budget to simulate)"
                )
            else:
                lines.append(
                    f"budget.simulations = {self.budget}: the imported rows count "
                    f"{self.total} of it, so the launch simulates {self.budget - self.total} more"
                )
        return lines


@trust_keyword
def import_simulations(
    config: Any,
    run_dir: str | os.PathLike[str],
    arrays_or_files: Mapping[str, Any],
    *,
    overrides: Iterable[str] = (),
    trust: bool = False,
) -> ImportResult:
    """Bring simulations made elsewhere into a run, as the initial rows of its first launch.

    Args:
        config: the run's config (a YAML path, mapping, OmegaConf config or RunConfig); ``None``
            for a run folder an earlier import wrote (its own ``config.yml``; a config given
            there must equal it).
        run_dir: the run folder: new, empty, or written by an earlier import and never
            launched (the rows are added as another file).
        arrays_or_files: node → its rows, one per simulation: an array ``(n, *D)``, a ``.npy``
            file, ``"FILE.npz:key"``, or a folder of ``.npy`` / ``.npz`` shards (concatenated
            in name order; :mod:`kestrel.importing._sources`). Every node of the graph.
        overrides: dotlist overrides of the config.
        trust: the user trusts the run folder (``--trust``): its ``config.yml`` may name any
            target (:mod:`kestrel.rundir._trust`).

    Returns:
        An :class:`ImportResult`. A later :func:`kestrel.launch` of the run (``config=None``,
        ``kestrel launch -o RUN``) appends the rows as its initial rows, simulates only what
        ``min_samples + validation_samples`` still needs beyond them, and counts them as
        simulations of ``budget.simulations``. The rows are taken as draws from the prior
        (their ``log_prob`` is the prior's, as for a launch's initial simulation).

    Raises:
        ConfigError: the rows do not fit the config — a node missing or unknown, a file that
            cannot be read, another per-row shape than the dry run's (or the observation's),
            unequal row counts, NaN or ±inf, rows outside the prior's support: one line per
            problem naming the node and the file; nothing is written. Also: ``run_dir`` is a
            file, a folder of other files, or a launched run; no config for a new run; a config
            without ``buffer`` section or estimator, or one that sets another
            ``buffer.initial_samples_path``; a config that differs from the run's own.
        RunLockedError: a launch (or another import) holds the run's lock; nothing is written.
        GraphError, SimulatorError: as the dry run of a launch (a simulator that raises, or
            whose output does not fit its observation).
        OSError: a file cannot be written (what this import wrote is removed).
    """
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    root = RunDir(run_dir).root
    check_launch_folder(root)  # a file, or a folder of the user's files: refused first
    with RunLock(root) as lock:
        run = RunDir(root)
        _refuse_launched(run)
        new = not run.has_config()
        cfg = _config(config, run, overrides)
        outputs: dict[str, dict[str, np.ndarray]] = {}
        dry_run(cfg.graph, outputs=outputs)  # as a launch's preflight, before anything is written
        for name, fields in outputs.items():  # the simulator's shape settles the observation's
            if cfg.graph.nodes[name].observed is not None:
                cfg.graph.fit_observation(name, fields["value"].shape[1:])
        sources = read_sources(arrays_or_files)
        arrays, problems = check_rows(cfg.graph, sources, expected_keys(cfg.graph, outputs))
        if problems:
            raise ConfigError(_problems_message(problems))
        rows = len(next(iter(arrays.values())))
        if rows == 0:
            raise ConfigError(
                "kestrel import: the arrays hold no rows ("
                + ", ".join(f"{s.node}={s.label}" for s in sources.values())
                + "); nothing was written"
            )
        path, total = _write(run, cfg, arrays, sources, new)
        assert cfg.buffer is not None
        return ImportResult(
            run_dir=root,
            path=path,
            rows=rows,
            total=total,
            shapes={m: tuple(int(d) for d in a.shape[1:]) for m, a in arrays.items()},
            new_run=new,
            budget=cfg.budget.simulations,
            initial=cfg.buffer.min_samples + cfg.buffer.validation_samples,
            notes=list(lock.notes),
        )


def _refuse_launched(run: RunDir) -> None:
    """A launched run already has a buffer: rows enter a run only before its first launch.

    Raises:
        ConfigError: the run was launched (names the launches and the remedy).
        RunFileError: its ``run.json`` is damaged.
    """
    launches = run.history.launches() if os.path.exists(run.history.path) else []
    snapshot = os.path.join(run.snapshots, BUFFER_FILE)
    if not (launches or os.path.exists(run.status_file) or os.path.exists(snapshot)):
        return
    what = f"{len(launches)} launch{'es' if len(launches) != 1 else ''}" if launches else "a launch"
    fresh = os.path.join(os.path.dirname(run.root), os.path.basename(run.root) + "-imported")
    raise ConfigError(
        f"{run.root} was launched ({what} in {RUN_FILE}): imported rows enter a run only as the "
        "initial rows of its first launch, and this run's buffer is filled already; import "
        f"into a new folder and launch that: `kestrel import -c CONFIG -o {fresh} NODE=FILE "
        f"...`, then `kestrel launch -o {fresh}`"
    )


def _config(config: Any, run: RunDir, overrides: list[str]) -> RunConfig:
    """The run's config with ``buffer.initial_samples_path`` at ``RUN/import``.

    Raises:
        ConfigError: see :func:`import_simulations`.
    """
    folder = import_folder(run.root)
    if run.has_config():  # an earlier import wrote it: its own config, unchanged
        cfg = run.load_config(overrides, check_targets=_TARGETS)
        recorded = run.load_config(check_targets=(), trust=True)  # compared, never built
        other = cfg if config is None else _with_folder(_load(config, run, overrides), folder)
        changes = run_config_changes(recorded, other, run.root) + code_changes(recorded, other)
        if changes:
            keys = "1 key differs" if len(changes) == 1 else f"{len(changes)} keys differ"
            raise ConfigError(
                f"{run.root} holds rows imported under another config; {keys} from its "
                f"config.yml (old → new): {describe_changes(changes)}. Import into it without "
                "-c and without overrides (its own config), or into a new folder"
            )
        if not _is_folder(cfg, folder):
            raise ConfigError(
                f"{run.config_file}: buffer.initial_samples_path is "
                f"{_path_of(cfg)!r}, not the run's import folder; this run was not written by "
                "kestrel import: import into a new folder"
            )
        return cfg
    if config is None:
        raise ConfigError(
            f"{run.root} is a new run: give its config, `kestrel import -c CONFIG -o {run.root} "
            "NODE=FILE ...` (Python: config=...)"
        )
    return _with_folder(_load(config, run, overrides), folder)


def _load(config: Any, run: RunDir, overrides: list[str]) -> RunConfig:
    trust, origin = config_trust(config)  # a run folder's config.yml is that run's
    return load_config(
        config, overrides, run_dir=run.root, check_targets=_TARGETS, trust=trust, origin=origin
    )


def _path_of(cfg: RunConfig) -> str | None:
    return None if cfg.buffer is None else cfg.buffer.initial_samples_path


def _is_folder(cfg: RunConfig, folder: str) -> bool:
    path = _path_of(cfg)
    return path is not None and os.path.realpath(path) == os.path.realpath(folder)


def _with_folder(cfg: RunConfig, folder: str) -> RunConfig:
    """``cfg`` whose ``buffer.initial_samples_path`` is ``folder``.

    Raises:
        ConfigError: no ``buffer`` section, no estimator, or another ``initial_samples_path``
            (a run's own ``import`` folder, when the config is that run's, is replaced).
    """
    if cfg.buffer is None:
        raise ConfigError(
            "buffer: kestrel import writes the initial rows of a run's buffer; the config needs "
            "a buffer section (min_samples, max_samples, validation_samples)"
        )
    if not cfg.graph.latents:
        raise ConfigError(
            "graph: no node has an estimator; imported rows are for `kestrel launch` to train "
            "estimators on"
        )
    path = cfg.buffer.initial_samples_path
    if (
        path
        and not _is_folder(cfg, folder)
        and os.path.basename(os.path.normpath(path)) != (os.path.basename(folder))
    ):
        raise ConfigError(
            f"buffer.initial_samples_path: the config starts from {path}; kestrel import sets it "
            "to the run's import folder. Import those rows too (NODE=FILE.npz:NODE for each node) "
            "and drop the key"
        )
    data = dict(cfg._data)
    data["buffer"] = {**dict(data.get("buffer") or {}), "initial_samples_path": folder}
    buffer = dataclasses.replace(cfg.buffer, initial_samples_path=folder)
    return dataclasses.replace(cfg, buffer=buffer, _data=data)


def _write(
    run: RunDir,
    cfg: RunConfig,
    arrays: Mapping[str, np.ndarray],
    sources: Mapping[str, Any],
    new: bool,
) -> tuple[str, int]:
    """Write the rows, their record and (a new run) the config; returns the file and the
    run's imported rows. A failure removes what this import wrote (the record as it was)."""
    folder = import_folder(run.root)
    existed = os.path.isdir(folder)
    before = read_manifest(folder)
    manifest = os.path.exists(os.path.join(folder, MANIFEST_FILE))
    path = save_npz(next_import_file(folder), dict(arrays), durable=True)
    rows = len(next(iter(arrays.values())))
    entry = {
        "file": os.path.basename(path),
        "rows": rows,
        "sources": {node: _source_record(s) for node, s in sources.items()},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        write_manifest(folder, [*before, entry])
        if new:
            run.write_config(cfg)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)
            if manifest:
                write_manifest(folder, before)
            elif existed:
                os.remove(os.path.join(folder, MANIFEST_FILE))
            else:
                shutil.rmtree(folder)
        raise
    return path, sum(int(e.get("rows", 0)) for e in before) + rows


def _source_record(source: Any) -> Any:
    """Where a node's rows came from, for ``imports.json``: as given, and the files read."""
    return {"given": source.label, "files": list(source.files)}


def _problems_message(problems: list[str]) -> str:
    if len(problems) == 1:
        return f"{problems[0]}; nothing was imported"
    return f"{len(problems)} problems with the rows given; nothing was imported:\n" + "\n".join(
        f"  {p}" for p in problems
    )
