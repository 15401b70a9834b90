"""Reading a finished run without Ray or PyTorch: what ``kestrel plot`` and ``export`` need.

A run directory holds ``config.yml`` and one ``.npz`` per sampling call under
``samples/<mode>/`` (posterior samples per observation under
``samples/posterior/<observation-digest>/``, with the observation beside them as
``observation.npz``). This module finds the newest sample file, reads it, and gathers what is
drawn with it: the parameter names (node option ``names``), the observed data and the true
values (``<node>_true`` arrays in the observation files).

The layout of the sample files is :mod:`kestrel.rundir._samplefiles` (shared with ``RunDir`` of
kestrel-ray, which kestrel-core never imports).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kestrel.rundir._samplefiles as samplefiles
from kestrel.rundir._runfiles import (
    RunFileError,
    config_remedy,
    observation_remedy,
    read_array_file,
    read_npz,
    read_sample_arrays,
    read_yaml,
)
from kestrel_core import ConfigError, load_observation

__all__ = [
    "RunSamples",
    "run_config",
    "samples_dir",
    "latest_sample_file",
    "read_sample_file",
    "read_run_samples",
    "check_sample_file",
    "node_labels",
]


@dataclass
class RunSamples:
    """One sample file of a run and what is drawn with it.

    Attributes:
        path: the ``.npz`` file.
        mode: the sample mode (``posterior``, ``prior``, ``proposal``, ``ppd``).
        arrays: node → samples ``(n, *D)``.
        names: node → names of its flattened components (node option ``names``).
        latents: the nodes with an estimator, in config order.
        observed: node → the observation these samples belong to, shape ``D``.
        truth: node → true value, shape ``D`` (only when ``observed`` is the run's own
            observation, whose file holds ``<node>_true``).
    """

    path: str
    mode: str
    arrays: dict[str, np.ndarray]
    names: dict[str, list[str]] = field(default_factory=dict)
    latents: list[str] = field(default_factory=list)
    observed: dict[str, np.ndarray] = field(default_factory=dict)
    truth: dict[str, np.ndarray] = field(default_factory=dict)


def run_config(run_dir: str) -> dict[str, Any]:
    """``RUN/config.yml`` as plain containers.

    Raises:
        ConfigError: ``run_dir`` holds no ``config.yml``.
        RunFileError: (a ConfigError) it is empty, not YAML or not a mapping (names the file
            and the remedy).
    """
    path = os.path.join(run_dir, "config.yml")
    data = read_yaml(path, config_remedy(run_dir)) if os.path.isfile(path) else None
    if data is None:
        raise ConfigError(f"{run_dir}: not a run directory (no config.yml)")
    return data


def samples_dir(run_dir: str, config: Mapping[str, Any] | None = None) -> str:
    """``RUN/samples`` (or the config's ``paths.samples`` when it is a plain path)."""
    paths = (config or {}).get("paths") or {}
    samples = paths.get("samples") if isinstance(paths, Mapping) else None
    if isinstance(samples, str) and "${" not in samples:
        return samples if os.path.isabs(samples) else os.path.join(run_dir, samples)
    return os.path.join(run_dir, "samples")


def latest_sample_file(run_dir: str, mode: str = "posterior") -> str:
    """The newest sample file of ``mode`` (the one ``<mode>/LATEST`` names, else the newest
    ``NNNNNN.npz`` under ``samples/<mode>/``, searched through the observation folders).

    Raises:
        ConfigError: the run has no samples of ``mode``.
    """
    try:
        config = run_config(run_dir)
    except RunFileError:
        raise  # a damaged config.yml is named, not taken for the default layout
    except ConfigError:
        config = {}
    return samplefiles.latest_sample_file(samples_dir(run_dir, config), mode)


def read_sample_file(
    path: str, run_dir: str | None = None, mode: str = "posterior"
) -> dict[str, np.ndarray]:
    """node → array of one sample file (of ``mode`` in the run ``run_dir``: named in the
    remedy of a damaged file).

    Raises:
        ConfigError: the file is missing or not an ``.npz``.
        RunFileError: (a ConfigError) it is empty, cut short or damaged (names the file and
            the remedy).
    """
    if not os.path.isfile(path) or not path.endswith(".npz"):
        raise ConfigError(f"{path}: not a sample file (expected an existing .npz)")
    return read_sample_arrays(path, run_dir, mode)


def node_labels(node: str, size: int, names: list[str] | None) -> list[str]:
    """Labels of a node's ``size`` flattened components: its ``names`` when they fit, else
    ``node`` (one component) or ``node[i]``."""
    if names and len(names) == size:
        return list(names)
    return [node] if size == 1 else [f"{node}[{i}]" for i in range(size)]


def _observation_file(spec: str, run_dir: str) -> str:
    match = re.match(r"""^(?P<path>.+?)\[\s*['"].*['"]\s*\]\s*$""", spec.strip())
    path = match["path"].strip() if match else spec.strip()
    return os.path.normpath(os.path.join(run_dir, os.path.expanduser(path)))


def _run_observations(
    graph: Mapping[str, Any], run_dir: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The run's own observations and the ``<node>_true`` arrays of their files."""
    observed: dict[str, np.ndarray] = {}
    truth: dict[str, np.ndarray] = {}
    for name, node in graph.items():
        spec = (node or {}).get("observed") if isinstance(node, Mapping) else None
        if not isinstance(spec, str):
            continue
        path = _observation_file(spec, run_dir)
        if os.path.isfile(path):  # a damaged copy is named (a missing one: not drawn)
            read_array_file(path, observation_remedy(run_dir, str(name)))
        try:
            observed[name] = np.asarray(load_observation(spec, run_dir))
        except ConfigError:
            continue
        if path.endswith(".npz") and os.path.isfile(path):
            data = read_npz(path, observation_remedy(run_dir, str(name)))
            for key, value in data.items():
                if key.endswith("_true") and key[:-5] in graph:
                    truth[key[:-5]] = value
    return observed, truth


def _refuse_batch(path: str, graph: Mapping[str, Any], run_dir: str) -> None:
    """A file of samples for m observations (``(m, n, …)`` arrays) is not one posterior."""
    beside = samplefiles.sample_observation(path) or {}
    own, _ = _run_observations(graph, run_dir)
    for node, value in beside.items():
        if node in own and value.ndim == own[node].ndim + 1:
            raise ConfigError(
                f"{path}: samples for {value.shape[0]} observations ((m, n, …) arrays, from "
                "`kestrel sample --observation` of an (m, …) array); give a file of one "
                "observation's samples"
            )


def check_sample_file(
    path: str, run_dir: str, mode: str, config: Mapping[str, Any] | None = None
) -> str:
    """Check that ``path`` is one of this run's sample files of ``mode`` (``NNNNNN.npz`` under
    ``samples/<mode>/`` or one of its observation folders), not the observation beside them,
    the user's data or another run's samples: ``kestrel plot --file`` and ``export --file``
    draw only what the run sampled.

    Returns:
        ``path`` made absolute.

    Raises:
        ConfigError: one line naming the file and the folder its sample files are in.
    """
    from kestrel.rundir._outputs import inside

    full = os.path.abspath(path)
    samples = samples_dir(run_dir, config)
    real = os.path.realpath(full)
    folder = os.path.realpath(os.path.join(samples, mode))
    parent = os.path.dirname(real)
    if samplefiles._SAMPLE_FILE.match(os.path.basename(real)) and (
        parent == folder
        or (
            os.path.dirname(parent) == folder
            and samplefiles._DIGEST.match(os.path.basename(parent))
        )
    ):
        return full
    for other in ("prior", "posterior", "proposal", "ppd"):
        if other != mode and inside(real, os.path.join(samples, other)):
            raise ConfigError(
                f"--file {full} is a {other} sample file of this run, not a {mode} one; "
                "it is refused"
            )
    raise ConfigError(
        f"--file {full} is not one of this run's {mode} sample files "
        f"({os.path.join(samples, mode)}/…/NNNNNN.npz); it is refused"
    )


def read_run_samples(
    run_dir: str | os.PathLike[str], mode: str = "posterior", path: str | None = None
) -> RunSamples:
    """One sample file of a run (the newest of ``mode`` unless ``path`` is given) with the
    names, observation and true values that go with it.

    Raises:
        ConfigError: not a run directory (:func:`~kestrel.rundir._folder.check_run_folder`),
            ``path`` not one of its sample files of ``mode`` (:func:`check_sample_file`), no
            samples, or a node's ``names`` do not match its dimension in the file.
    """
    from kestrel.rundir._folder import check_run_folder
    from kestrel_core.internal import check_names, check_names_size

    run_dir = os.path.abspath(os.fspath(run_dir))
    check_run_folder(run_dir)  # a run a launch wrote, never a model folder
    config = run_config(run_dir)
    path = (
        check_sample_file(path, run_dir, mode, config)
        if path
        else latest_sample_file(run_dir, mode)
    )
    arrays = read_sample_file(path, run_dir, mode)
    graph = config.get("graph") or {}
    _refuse_batch(path, graph, run_dir)
    names: dict[str, list[str]] = {}
    for node, spec in graph.items():
        raw = spec.get("names") if isinstance(spec, Mapping) else None
        if raw is None:
            continue
        where = f"graph.{node}.names"
        listed = list(check_names(raw, where))
        if node in arrays:
            check_names_size(listed, int(np.prod(arrays[node].shape[1:])), where, path)
        names[node] = listed
    latents = [n for n, s in graph.items() if isinstance(s, Mapping) and s.get("estimator")]
    observed, truth = _run_observations(graph, run_dir)
    beside = {k: v for k, v in (samplefiles.sample_observation(path) or {}).items() if k in graph}
    if beside and any(
        k in observed and (v.shape != observed[k].shape or not np.array_equal(v, observed[k]))
        for k, v in beside.items()
    ):
        truth = {}  # samples for another observation: the run's true values do not apply
    observed.update(beside)
    return RunSamples(path, mode, arrays, names, latents, observed, truth)
