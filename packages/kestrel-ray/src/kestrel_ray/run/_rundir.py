"""The run directory: where a launch writes and what ``kestrel sample`` / ``plot`` read back.

Layout (``RUN`` is the directory given with ``-o``)::

    RUN/config.yml                    the resolved config of the run (a resume reads it)
    RUN/status.json                   status ("running", "completed", "interrupted", "failed",
                                      "aborted"), seed, times, epochs, buffer counts
    RUN/graph/<node>/                 estimator weights (the estimator's own files),
                                      output.log (the node actor's log), metrics.csv (one row
                                      per epoch), saved.json (written after a successful save)
    RUN/graph/driver/output.log       the driver's log
    RUN/samples/<mode>/NNNNNN.npz     one file per sampling call: one array per node, (n, …)
    RUN/buffer/snapshots/             buffer snapshots (``buffer.snapshot_every``)
    RUN/plots/                        ``kestrel plot``

The ``paths`` section of the config may move ``graph``, ``samples`` and ``buffer`` elsewhere;
:class:`RunDir` follows it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core import ConfigError
from kestrel_core._npz import save_npz

__all__ = ["RunDir", "SAVED_MARKER", "CONFIG_FILE"]

CONFIG_FILE = "config.yml"
STATUS_FILE = "status.json"
#: written into ``graph/<node>/`` after the node's estimator saved without error
SAVED_MARKER = "saved.json"
_SAMPLE_FILE = re.compile(r"^(\d{6,})\.npz$")


class RunDir:
    """Paths of one run directory.

    Args:
        root: the run directory (made absolute; not created here).
        config: the run's :class:`kestrel_core.RunConfig`, whose ``paths`` override the
            default folders; ``None`` uses the defaults inside ``root``.
    """

    def __init__(self, root: str | os.PathLike[str], config: Any = None):
        self.root = os.path.abspath(os.fspath(root))
        paths = getattr(config, "paths", None)
        self.graph = getattr(paths, "graph", None) or os.path.join(self.root, "graph")
        self.samples = getattr(paths, "samples", None) or os.path.join(self.root, "samples")
        self.buffer = getattr(paths, "buffer", None) or os.path.join(self.root, "buffer")

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

    def write_config(self, config: Any) -> None:
        """Write ``config.to_yaml()`` to ``RUN/config.yml``."""
        os.makedirs(self.root, exist_ok=True)
        tmp = self.config_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(config.to_yaml())
        os.replace(tmp, self.config_file)

    def write_status(self, status: Mapping[str, Any]) -> None:
        """Write ``RUN/status.json`` (atomically)."""
        _write_json(self.status_file, status)

    def read_status(self) -> dict[str, Any]:
        """``RUN/status.json`` as a dict (empty when missing)."""
        try:
            with open(self.status_file, encoding="utf-8") as fh:
                return json.load(fh)
        except FileNotFoundError:
            return {}

    # -- samples ---------------------------------------------------------------------------
    def sample_files(self, mode: str) -> list[str]:
        """The sample files of ``mode``, in order."""
        folder = os.path.join(self.samples, mode)
        if not os.path.isdir(folder):
            return []
        names = sorted(n for n in os.listdir(folder) if _SAMPLE_FILE.match(n))
        return [os.path.join(folder, n) for n in names]

    def write_samples(self, mode: str, arrays: Mapping[str, np.ndarray]) -> str:
        """Write ``samples/<mode>/NNNNNN.npz``, numbered after the existing files.

        Args:
            mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
            arrays: node name → array ``(n, *D)``.

        Returns:
            The path written.
        """
        names = (_SAMPLE_FILE.match(os.path.basename(p)) for p in self.sample_files(mode))
        existing = [int(m.group(1)) for m in names if m is not None]
        index = max(existing) + 1 if existing else 0
        return save_npz(os.path.join(self.samples, mode, f"{index:06d}.npz"), arrays)

    def read_samples(self, mode: str) -> dict[str, np.ndarray]:
        """Every sample file of ``mode`` concatenated: node name → array ``(n_total, *D)``.

        Raises:
            ConfigError: there are no samples of ``mode`` in this run.
        """
        files = self.sample_files(mode)
        if not files:
            raise ConfigError(
                f"{os.path.join(self.samples, mode)}: no {mode} samples in this run; "
                f"run `kestrel sample {mode} -o {self.root}` first"
            )
        parts: dict[str, list[np.ndarray]] = {}
        for path in files:
            with np.load(path) as data:
                for key in data.files:
                    parts.setdefault(key, []).append(data[key])
        return {k: np.concatenate(v) for k, v in parts.items()}


def _write_json(path: str, data: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(dict(data), fh, indent=2, default=_jsonable)
        fh.write("\n")
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
