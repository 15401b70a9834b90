"""``kestrel plot``: a corner plot of a run's samples (matplotlib, an optional extra).

Reads ``RUN/samples/<mode>/*.npz`` (one array per node, ``(n, *D)``), flattens every node to
its ``prod(D)`` components and draws the one- and two-dimensional marginals. When a node's
observation file (from ``RUN/config.yml``) also holds ``<node>_true`` for a sampled node, that
value is drawn over the marginals. Needs no Ray and no PyTorch; matplotlib is imported only
when a plot is drawn (``pip install 'kestrel-core[plot]'``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._errors import ConfigError, KestrelError

__all__ = ["plot_run", "read_samples", "read_truth", "MissingExtra", "MAX_DIMS"]

#: components drawn at most (the first ones, in node order)
MAX_DIMS = 12
_SAMPLE_FILE = re.compile(r"^\d{6,}\.npz$")
_KEYED = re.compile(r"""^(?P<path>.+?)\[\s*(?P<q>['"])(?P<key>.*)(?P=q)\s*\]\s*$""")


class MissingExtra(KestrelError):
    """An optional dependency (matplotlib) is not installed."""


def read_samples(run_dir: str, mode: str = "posterior") -> dict[str, np.ndarray]:
    """Every ``samples/<mode>/NNNNNN.npz`` of a run, concatenated: node → ``(n, *D)``.

    Raises:
        ConfigError: the run has no samples of ``mode``.
    """
    folder = os.path.join(_samples_dir(run_dir), mode)
    files = (
        sorted(f for f in os.listdir(folder) if _SAMPLE_FILE.match(f))
        if os.path.isdir(folder)
        else []
    )
    if not files:
        raise ConfigError(
            f"{folder}: no {mode} samples; run `kestrel launch` or "
            f"`kestrel sample {mode} -o {run_dir}` first"
        )
    parts: dict[str, list[np.ndarray]] = {}
    for name in files:
        with np.load(os.path.join(folder, name), allow_pickle=False) as data:
            for key in data.files:
                parts.setdefault(key, []).append(data[key])
    return {k: np.concatenate(v) for k, v in parts.items()}


def _run_config(run_dir: str) -> dict[str, Any]:
    import yaml

    path = os.path.join(run_dir, "config.yml")
    if not os.path.isfile(path):
        raise ConfigError(f"{run_dir}: not a run directory (no config.yml)")
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def _samples_dir(run_dir: str) -> str:
    try:
        paths = _run_config(run_dir).get("paths") or {}
    except ConfigError:
        paths = {}
    samples = paths.get("samples")
    return (
        samples
        if isinstance(samples, str) and "${" not in samples
        else os.path.join(run_dir, "samples")
    )


def read_truth(run_dir: str) -> dict[str, np.ndarray]:
    """``{node: true value}`` from the ``<node>_true`` arrays of the run's observation files."""
    graph = _run_config(run_dir).get("graph") or {}
    base = os.path.dirname(os.path.abspath(os.path.join(run_dir, "config.yml")))
    truth: dict[str, np.ndarray] = {}
    for node in graph.values():
        spec = (node or {}).get("observed")
        if not isinstance(spec, str):
            continue
        match = _KEYED.match(spec.strip())
        path = os.path.join(base, match["path"].strip() if match else spec.strip())
        if not path.endswith(".npz") or not os.path.isfile(path):
            continue
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                if key.endswith("_true") and key[:-5] in graph:
                    truth[key[:-5]] = np.asarray(data[key])
    return truth


def _columns(
    samples: Mapping[str, np.ndarray], truth: Mapping[str, np.ndarray]
) -> tuple[list[str], np.ndarray, list[float | None]]:
    labels, cols, marks = [], [], []
    for node, arr in samples.items():
        flat = np.asarray(arr, dtype=np.float64).reshape(arr.shape[0], -1)
        true = truth.get(node)
        true_flat = None if true is None or np.size(true) != flat.shape[1] else np.ravel(true)
        for i in range(flat.shape[1]):
            labels.append(node if flat.shape[1] == 1 else f"{node}[{i}]")
            cols.append(flat[:, i])
            marks.append(None if true_flat is None else float(true_flat[i]))
    return labels[:MAX_DIMS], np.stack(cols[:MAX_DIMS], axis=1), marks[:MAX_DIMS]


def plot_run(
    run_dir: str | os.PathLike[str], mode: str = "posterior", output: str | None = None
) -> str:
    """Draw the corner plot of a run's ``mode`` samples.

    Args:
        run_dir: the run directory.
        mode: which samples (``posterior`` by default).
        output: the image file (default ``RUN/plots/<mode>.png``).

    Returns:
        The path written.

    Raises:
        MissingExtra: matplotlib is not installed.
        ConfigError: not a run directory, or no samples of ``mode``.
    """
    run_dir = os.path.abspath(os.fspath(run_dir))
    samples = read_samples(run_dir, mode)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra(
            "kestrel plot needs matplotlib: pip install 'kestrel-core[plot]'"
        ) from None
    labels, data, marks = _columns(samples, read_truth(run_dir))
    d = data.shape[1]
    size = min(2.0 * d, 24.0)
    fig, axes = plt.subplots(d, d, figsize=(size, size), squeeze=False)
    for i in range(d):
        for j in range(d):
            ax = axes[i, j]
            if j > i:
                ax.set_visible(False)
                continue
            if i == j:
                ax.hist(data[:, i], bins=40, histtype="step", color="C0", density=True)
                if marks[i] is not None:
                    ax.axvline(marks[i], color="C3")
                ax.set_yticks([])
            else:
                ax.hist2d(data[:, j], data[:, i], bins=40, cmap="Blues")
                if marks[i] is not None and marks[j] is not None:
                    ax.plot(marks[j], marks[i], "s", color="C3", ms=4)
            if i == d - 1:
                ax.set_xlabel(labels[j])
            else:
                ax.set_xticklabels([])
            if j == 0 and i > 0:
                ax.set_ylabel(labels[i])
            elif j > 0:
                ax.set_yticklabels([])
            ax.tick_params(labelsize=6)
    n = data.shape[0]
    fig.suptitle(
        f"{mode}: {n} samples" + (" (red: true value)" if any(m is not None for m in marks) else "")
    )
    path = output or os.path.join(run_dir, "plots", f"{mode}.png")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
