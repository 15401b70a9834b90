"""The run directory: where a launch writes and what ``kestrel sample`` / ``plot`` read back.

Layout (``RUN`` is the directory given with ``-o``)::

    RUN/config.yml                    the run's config, relocatable: no absolute path to the
                                      run's own files (kestrel.rundir._config)
    RUN/observations/<node>.npy|npz   the observations, copied in at launch
    RUN/run.json                      the history of launches (seed, times, status, epochs,
                                      config digest; :class:`RunHistory`); written with
                                      config.yml, it marks the folder as a run
                                      (kestrel.rundir._folder)
    RUN/status.json                   status of the latest launch ("running", "completed",
                                      "interrupted", "timeout", "failed", "aborted"), seed,
                                      times, epochs, buffer counts
    RUN/previous/N/                   the contents of the run before ``--restart`` number N
    RUN/graph/<node>/                 estimator weights (the estimator's own files),
                                      output.log (the node actor's log), metrics.csv (one row
                                      per epoch), saved.json (written after a successful save)
    RUN/graph/driver/output.log       the driver's log
    RUN/samples/prior/NNNNNN.npz      one file per sampling call: one array per node, (n, …)
    RUN/samples/<mode>/<digest>/      posterior, proposal, ppd: NNNNNN.npz per call and the
                                      observation they are drawn for (observation.npz), one
                                      folder per observation (kestrel.rundir._samplefiles)
    RUN/buffer/snapshots/             buffer snapshots (``buffer.npz``; ``buffer.snapshot_every``)
    RUN/buffer/journal/               every row appended by the run's launches, one file an
                                      append (``<first id>-<last id>.npz``,
                                      ``buffer.journal``): replayed beyond the snapshot on
                                      resume, and kept whole as the run's simulation bank
                                      (``manifest.jsonl``: each file's ids, origin and
                                      simulator digest; kestrel.persist._bank), which
                                      ``--reuse`` starts a new run from
    RUN/import/NNNNNN.npz             rows ``kestrel import`` brought in, the run's initial
                                      rows (``imports.json``: their sources; kestrel.importing)
    RUN/plots/                        ``kestrel plot``

The ``paths`` section of the config may move ``graph``, ``samples`` and ``buffer`` elsewhere;
:class:`RunDir` follows it. Paths inside the run are always found from the directory the
:class:`RunDir` was opened at, so a copied or moved run directory works where it is.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

import kestrel.rundir._samplefiles as samplefiles
from kestrel.rundir._config import (
    OBSERVATIONS_DIR,
    RUN_CONFIG_FILE,
    config_digest,
    load_run_config,
    portable_config,
    run_config_yaml,
    save_observations,
)
from kestrel.rundir._folder import check_launch_folder, is_run_folder
from kestrel.rundir._history import RUN_FILE, RunHistory
from kestrel.rundir._runfiles import SAVED_MARKER, read_output_json, read_sample_arrays
from kestrel_core import ConfigError, RunConfig
from kestrel_core.internal import write_atomic
from kestrel_core.store import JOURNAL_DIR

__all__ = ["RunDir", "SAVED_MARKER", "CONFIG_FILE", "PREVIOUS_DIR"]

CONFIG_FILE = RUN_CONFIG_FILE
STATUS_FILE = "status.json"
#: ``RUN/previous/N/``: the contents of the run before a restart
PREVIOUS_DIR = "previous"
# SAVED_MARKER (``graph/<node>/saved.json``, written after the node's estimator saved without
# error) is defined with the run's other file readers (:mod:`._runfiles`)


class RunDir:
    """Paths of one run directory.

    Args:
        root: the run directory (made absolute; not created here).
        config: the run's :class:`kestrel_core.RunConfig`, whose ``paths`` override the
            default folders; ``None`` uses the defaults inside ``root``.
    """

    def __init__(self, root: str | os.PathLike[str], config: RunConfig | None = None):
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))  # ~ as a shell does
        paths = getattr(config, "paths", None)
        self.graph = getattr(paths, "graph", None) or os.path.join(self.root, "graph")
        self.samples = getattr(paths, "samples", None) or os.path.join(self.root, "samples")
        self.buffer = getattr(paths, "buffer", None) or os.path.join(self.root, "buffer")
        self._graph = getattr(config, "graph", None)  # its observations: write_samples' default

    # -- files -----------------------------------------------------------------------------
    @property
    def config_file(self) -> str:
        """``RUN/config.yml``."""
        return os.path.join(self.root, CONFIG_FILE)

    @property
    def status_file(self) -> str:
        """``RUN/status.json``."""
        return os.path.join(self.root, STATUS_FILE)

    @property
    def plots(self) -> str:
        """``RUN/plots``."""
        return os.path.join(self.root, "plots")

    @property
    def snapshots(self) -> str:
        """``<buffer>/snapshots``."""
        return os.path.join(self.buffer, "snapshots")

    @property
    def journal(self) -> str:
        """``<buffer>/journal``: every append of the run's launches (the simulation bank)."""
        return os.path.join(self.buffer, JOURNAL_DIR)

    def node_dir(self, node: str) -> str:
        """``<graph>/<node>`` (``driver`` for the driver's log)."""
        return os.path.join(self.graph, node)

    def has_config(self) -> bool:
        """Whether ``RUN/config.yml`` exists (the run was launched before)."""
        return os.path.isfile(self.config_file)

    def has_weights(self, node: str) -> bool:
        """Whether the estimator of ``node`` was saved here by a launch (its marker exists)."""
        return os.path.isfile(os.path.join(self.node_dir(node), SAVED_MARKER))

    def mark_saved(self, node: str, info: Mapping[str, Any]) -> None:
        """Write the node's ``saved.json`` (after its estimator saved)."""
        _write_json(os.path.join(self.node_dir(node), SAVED_MARKER), {"time": time.time(), **info})

    def makedirs(self) -> None:
        """Create the run directory and its ``graph/driver``, ``samples`` and ``buffer/snapshots``
        folders (snapshots are written there only with ``buffer.snapshot_every``)."""
        for path in (self.root, self.node_dir("driver"), self.samples, self.snapshots):
            os.makedirs(path, exist_ok=True)

    @property
    def observations(self) -> str:
        """``RUN/observations`` (the observations copied in at launch)."""
        return os.path.join(self.root, OBSERVATIONS_DIR)

    @property
    def history(self) -> RunHistory:
        """The launches recorded in ``RUN/run.json``."""
        return RunHistory(os.path.join(self.root, RUN_FILE))

    def write_config(self, config: RunConfig) -> str:
        """Copy the observations into ``RUN/observations/`` and write ``RUN/config.yml``.

        The file names nothing inside the run by an absolute path
        (:func:`kestrel.rundir._config.portable_config`); it is rewritten only when its
        text changes.

        Args:
            config: the run's :class:`kestrel_core.RunConfig`.

        ``RUN/run.json`` (an empty history when there is none yet) is written with it: the
        mark of a folder Kestrel wrote. A ``config.yml`` without that mark is the user's,
        never overwritten.

        Returns:
            The config's digest (sha256 of its canonical YAML, ``paths.imports`` left out).

        Raises:
            ConfigError: ``RUN/config.yml`` exists but the folder is not a run, or ``RUN`` is
                a file.
            OSError: a file cannot be written.
        """
        if os.path.lexists(self.config_file) and not is_run_folder(self.root):
            check_launch_folder(self.root)  # raises: the user's file, not ours to overwrite
            raise ConfigError(f"{self.config_file}: not written by Kestrel; not overwritten")
        os.makedirs(self.root, exist_ok=True)
        if not os.path.exists(self.history.path):
            _write_json(self.history.path, {"launches": []})
        data = portable_config(config, self.root, save_observations(config, self.root))
        text = run_config_yaml(data)
        try:
            with open(self.config_file, encoding="utf-8") as fh:
                same = fh.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            write_atomic(self.config_file, text.encode("utf-8"))
        return config_digest(data)

    def load_config(
        self,
        overrides: Iterable[str] = (),
        *,
        check_targets: Sequence[str] = ("simulator",),
        trust: bool | None = None,
    ) -> RunConfig:
        """``RUN/config.yml`` loaded for this directory (wherever the run lies now); ``trust``
        as :func:`kestrel.rundir._config.load_run_config`.

        Raises:
            ConfigError, GraphError: as :func:`kestrel.rundir._config.load_run_config`.
        """
        return load_run_config(self.root, overrides, check_targets=check_targets, trust=trust)

    def archive(self) -> str:
        """Move everything in the run directory to ``RUN/previous/N/`` (N = 1, 2, …), except
        hidden entries not Kestrel's own: a run may be started in a folder holding only hidden
        files (``.git``, ``.gitkeep``), and a restart leaves those where the user put them.
        Kestrel's own hidden files (unfinished atomic writes, ``.tmp-*``) move with the run.

        Returns:
            The folder the old contents went to.

        Raises:
            ConfigError: the folder is not a run (nothing is moved).
            OSError: a file cannot be moved.
        """
        if not is_run_folder(self.root):
            raise ConfigError(
                f"{self.root} is not a Kestrel run (no run.json); --restart moves only a run's "
                "own contents, so nothing was moved"
            )
        previous = os.path.join(self.root, PREVIOUS_DIR)
        numbers = [int(n) for n in _listdir(previous) if n.isdigit()]
        target = os.path.join(previous, str(max(numbers, default=0) + 1))
        os.makedirs(target)
        for name in _listdir(self.root):
            users = name.startswith(".") and not name.startswith(".tmp-")
            if name != PREVIOUS_DIR and not users:
                shutil.move(os.path.join(self.root, name), os.path.join(target, name))
        return target

    def write_status(self, status: Mapping[str, Any]) -> None:
        """Write ``RUN/status.json`` (atomically)."""
        _write_json(self.status_file, status)

    def read_status(self) -> dict[str, Any]:
        """``RUN/status.json`` as a dict: empty when missing, and when damaged (empty, not
        JSON) empty with a :class:`~kestrel.rundir._runfiles.RunFileWarning` naming it — the
        file is an output, rewritten by the next launch, and never stops a command."""
        return read_output_json(self.status_file)

    # -- samples (layout: kestrel.rundir._samplefiles) -----------------------------------------
    def sample_files(
        self, mode: str, observation: str | Mapping[str, Any] | None = None
    ) -> list[str]:
        """The sample files of ``mode``, oldest first.

        Args:
            mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
            observation: an observation digest or node → ``x_o``: only the files drawn for it
                (``samples/<mode>/<digest>/``); ``None``: every file of the mode.
        """
        return samplefiles.sample_files(self.samples, mode, observation)

    def latest_sample_file(
        self, mode: str, observation: str | Mapping[str, Any] | None = None
    ) -> str:
        """The newest sample file of ``mode`` (of one observation when given).

        Raises:
            ConfigError: there is none.
        """
        return samplefiles.latest_sample_file(self.samples, mode, observation)

    @staticmethod
    def sample_observation(path: str) -> dict[str, np.ndarray] | None:
        """The observation a sample file was drawn for (node → ``x_o``), saved beside it;
        ``None`` for prior samples and files of the old flat layout."""
        return samplefiles.sample_observation(path)

    def run_observations(self) -> dict[str, np.ndarray]:
        """The run's own observations (node → ``x_o``), from the config this RunDir was made
        with (empty without one)."""
        return dict(getattr(self._graph, "observations", None) or {})

    def write_samples(
        self,
        mode: str,
        arrays: Mapping[str, np.ndarray],
        observations: Mapping[str, Any] | None = None,
        *,
        latest: bool = True,
    ) -> str:
        """Write the next sample file of ``mode``: ``samples/prior/NNNNNN.npz``, or
        ``samples/<mode>/<digest>/NNNNNN.npz`` with ``observation.npz`` beside it for
        ``posterior``, ``proposal`` and ``ppd``.

        Args:
            mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
            arrays: node name → array ``(n, *D)``.
            observations: node → ``x_o`` the samples were drawn for (default: the run's own,
                :meth:`run_observations`).
            latest: record the file as the mode's newest (``False``: a batched file).

        Returns:
            The path written.

        Raises:
            ConfigError: an observation-dependent mode and no observation known.
        """
        obs = self.run_observations() if observations is None else observations
        return samplefiles.write_sample_file(self.samples, mode, arrays, obs, latest=latest)

    def read_samples(
        self, mode: str, observation: str | Mapping[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        """The newest sample file of ``mode`` (of one observation when given), never a pool of
        several: node name → array ``(n, *D)``.

        Raises:
            ConfigError: there are no samples of ``mode`` (for that observation) in this run.
            RunFileError: (a ConfigError) the newest file is damaged (names it).
        """
        return read_sample_arrays(self.latest_sample_file(mode, observation), self.root, mode)


def _listdir(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []


def _write_json(path: str, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON, atomically (a failed write leaves the old file and no temporary
    one; a full disk raises :class:`~kestrel_core.internal.DiskFullError` naming ``path``)."""
    text = json.dumps(dict(data), indent=2, default=_jsonable) + "\n"
    write_atomic(path, text.encode("utf-8"), durable=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
