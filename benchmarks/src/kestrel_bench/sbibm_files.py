"""The SBI benchmark's own observations and reference posterior samples, read from its package.

The benchmark (Lueckmann et al. 2021, "Benchmarking simulation-based inference", AISTATS;
package ``sbibm``) ships, for each task and each of its observations 1-10, the observed data
(``observation.csv``), the parameters that made them (``true_parameters.csv``) and 10 000
reference posterior samples (``reference_posterior_samples.csv.bz2``) in
``sbibm/tasks/<task>/files/num_observation_<n>/``. This module reads those files as numpy
arrays **without importing** ``sbibm`` (its import pulls pyro and, for some tasks, Julia):
``pip install --no-deps sbibm==1.1.0`` is all it needs, and the bench environment does that
(``hatch.toml``'s ``post-install-commands``).
"""

from __future__ import annotations

import bz2
import importlib.metadata
import importlib.util
import io
from pathlib import Path

import numpy as np

__all__ = ["SbibmMissing", "files_root", "version", "observation", "reference_samples"]

#: the observations every task of the benchmark has
OBSERVATIONS = tuple(range(1, 11))


class SbibmMissing(FileNotFoundError):
    """The benchmark's package (its data files) is not installed, or lacks a task's file."""


def files_root() -> Path:
    """The installed ``sbibm`` package's folder (not imported).

    Raises:
        SbibmMissing: ``sbibm`` is not installed; the message gives the remedy.
    """
    spec = importlib.util.find_spec("sbibm")
    if spec is None or not spec.submodule_search_locations:
        raise SbibmMissing(
            "the SBI benchmark's data files are not installed: run "
            "`pip install --no-deps sbibm==1.1.0` in this environment "
            "(`hatch run bench:compare` has it)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def version() -> str:
    """The installed ``sbibm`` version (recorded with every comparison's rows)."""
    files_root()
    return importlib.metadata.version("sbibm")


def _folder(task: str, num: int) -> Path:
    if num not in OBSERVATIONS:
        raise ValueError(f"observation {num!r}: the benchmark has observations 1-10")
    folder = files_root() / "tasks" / task / "files" / f"num_observation_{num}"
    if not folder.is_dir():
        raise SbibmMissing(f"{folder}: no such folder (task {task!r}, observation {num})")
    return folder


def _csv(path: Path) -> np.ndarray:
    """A benchmark CSV (a header line of labels, then rows) as float64 ``(rows, columns)``."""
    raw = bz2.decompress(path.read_bytes()) if path.suffix == ".bz2" else path.read_bytes()
    return np.loadtxt(io.StringIO(raw.decode("utf-8")), delimiter=",", skiprows=1, ndmin=2)


def observation(task: str, num: int) -> np.ndarray:
    """Observation ``num`` (1-10) of ``task`` (the benchmark's name, e.g. ``"two_moons"``):
    float64 ``(dim_data,)``.

    Raises:
        SbibmMissing: the package or the task's file is missing.
        ValueError: ``num`` is not 1-10.
    """
    return _csv(_folder(task, num) / "observation.csv")[0]


def reference_samples(task: str, num: int) -> np.ndarray:
    """The benchmark's 10 000 reference posterior samples of observation ``num`` of ``task``:
    float64 ``(10000, dim_parameters)``.

    Raises:
        SbibmMissing: the package or the task's file is missing.
        ValueError: ``num`` is not 1-10.
    """
    return _csv(_folder(task, num) / "reference_posterior_samples.csv.bz2")
