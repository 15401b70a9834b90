"""``kestrel plot``: a corner plot of one sample file, and predictive bands of the data.

Draws one ``RUN/samples/<mode>/…/NNNNNN.npz`` (the newest unless a file is given; never a
pool of files) with the ``corner`` package (``pip install 'kestrel[plot]'``):

* the parameters — every node for ``posterior``/``proposal``, the nodes with an estimator for
  ``prior``/``ppd`` — flattened to their components, at most :data:`MAX_DIMS`;
* each axis spans the central 0.5–99.5 % of its samples (:data:`QUANTILES`);
* 1-D histograms on the diagonal, 2-D contours holding 68 % and 95 % of the mass below it;
* labels from the node option ``names`` (else ``theta[0]`` …), true values (``<node>_true`` in
  the observation file) marked, tick labels without offsets.

For ``ppd`` and ``prior`` samples, each observed node in the file also gets a figure of its
predictive median with 68 % and 95 % bands per component, the observed data drawn over it
(``RUN/plots/<mode>_<node>.png``). Needs no Ray and no PyTorch.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from kestrel.rundir._read import RunSamples, node_labels, read_run_samples
from kestrel_core import KestrelError

if TYPE_CHECKING:  # matplotlib is an optional extra, imported when a figure is drawn
    from matplotlib.figure import Figure

__all__ = ["plot_run", "corner_figure", "data_figure", "MissingExtra", "MAX_DIMS", "QUANTILES"]

#: components drawn at most (the first ones, in node order)
MAX_DIMS = 12
#: the central range each axis shows
QUANTILES = (0.005, 0.995)
#: the mass inside the 2-D contours
LEVELS = (0.68, 0.95)


class MissingExtra(KestrelError):
    """An optional dependency (matplotlib, corner, arviz) is not installed."""


def _pyplot() -> ModuleType:
    try:
        import matplotlib

        if "matplotlib.pyplot" not in sys.modules and "ipykernel" not in sys.modules:
            matplotlib.use("Agg")  # files only; a notebook's (or the caller's) backend is kept
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra(
            "kestrel plot needs matplotlib and corner: pip install 'kestrel[plot]'"
        ) from None
    return plt


def _corner() -> ModuleType:
    try:
        import corner
    except ImportError:
        raise MissingExtra(
            "kestrel plot needs the corner package: pip install 'kestrel[plot]'"
        ) from None
    return corner


def axis_range(values: np.ndarray) -> tuple[float, float]:
    """The central :data:`QUANTILES` range of ``values`` (float, (n,)); widened around a
    constant so the axis has a width."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (-1.0, 1.0)
    lo, hi = (float(q) for q in np.quantile(finite, QUANTILES))
    if hi <= lo:
        pad = max(abs(lo) * 1e-3, 1e-9)
        lo, hi = lo - pad, hi + pad
    return lo, hi


def _parameter_columns(
    run: RunSamples,
) -> tuple[list[str], np.ndarray, list[float | None]]:
    nodes = list(run.arrays)
    if run.mode in ("prior", "ppd"):
        chosen = [n for n in nodes if n in run.latents]
        nodes = chosen or [n for n in nodes if n not in run.observed]
    labels: list[str] = []
    cols: list[np.ndarray] = []
    marks: list[float | None] = []
    for node in nodes:
        arr = run.arrays[node]
        flat = np.asarray(arr, dtype=np.float64).reshape(arr.shape[0], -1)
        true = run.truth.get(node)
        true_flat = None if true is None or np.size(true) != flat.shape[1] else np.ravel(true)
        labels += node_labels(node, flat.shape[1], run.names.get(node))
        cols += [flat[:, i] for i in range(flat.shape[1])]
        if true_flat is None:
            marks += [None] * flat.shape[1]
        else:
            marks += [float(v) for v in true_flat]
    if not cols:
        return [], np.empty((0, 0)), []
    return labels[:MAX_DIMS], np.stack(cols[:MAX_DIMS], axis=1), marks[:MAX_DIMS]


def _plain_ticks(fig: Figure) -> None:
    """Tick labels show the values themselves: no "+3.9e-1" offset text on any axis."""
    from matplotlib.ticker import ScalarFormatter

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, ScalarFormatter):
                formatter.set_useOffset(False)


def corner_figure(run: RunSamples) -> Figure:
    """The corner plot of a sample file's parameters (a matplotlib figure).

    Raises:
        MissingExtra: matplotlib or corner is not installed.
        KestrelError: the file holds no parameters to draw.
    """
    plt = _pyplot()
    corner = _corner()
    labels, data, marks = _parameter_columns(run)
    if data.size == 0:
        raise KestrelError(f"{run.path}: no parameters to plot (nodes: {', '.join(run.arrays)})")
    ranges = [axis_range(data[:, i]) for i in range(data.shape[1])]
    d = data.shape[1]
    fig = plt.figure(figsize=(max(2.6 * d, 4.0), max(2.6 * d, 4.0)))
    has_truth = any(m is not None for m in marks)
    corner.corner(
        data,
        fig=fig,
        bins=40,
        range=ranges,
        labels=labels,
        truths=marks if has_truth else None,
        truth_color="C3",
        color="C0",
        levels=LEVELS,
        smooth=1.0,
        plot_datapoints=False,
        fill_contours=True,
        quantiles=(0.16, 0.5, 0.84),
        show_titles=True,
        title_fmt=".3g",
        max_n_ticks=4,
        use_math_text=True,
    )
    _plain_ticks(fig)
    note = "\nred: true value" if has_truth else ""
    fig.text(
        0.98,
        0.98,
        f"{run.mode}: {data.shape[0]} samples\n{os.path.basename(run.path)}\n"
        f"contours: {' and '.join(f'{int(100 * lv)} %' for lv in LEVELS)} of the mass{note}",
        ha="right",
        va="top",
        fontsize=9,
    )
    if d == 1:
        fig.subplots_adjust(top=0.78)
    return fig


def data_figure(run: RunSamples, node: str) -> Figure:
    """Predictive median and 68/95 % bands of ``node`` per component, its observation over it.

    Raises:
        MissingExtra: matplotlib is not installed.
    """
    plt = _pyplot()
    arr = np.asarray(run.arrays[node], dtype=np.float64)
    flat = arr.reshape(arr.shape[0], -1)
    obs = run.observed.get(node)
    k = flat.shape[1]
    labels = node_labels(node, k, run.names.get(node))
    fig, ax = plt.subplots(figsize=(max(6.0, min(0.15 * k, 14.0)), 4.0))
    idx = np.arange(k)
    q = np.quantile(flat, [0.025, 0.16, 0.5, 0.84, 0.975], axis=0)
    ax.fill_between(idx, q[0], q[4], color="C0", alpha=0.2, lw=0, label="95 %")
    ax.fill_between(idx, q[1], q[3], color="C0", alpha=0.4, lw=0, label="68 %")
    ax.plot(idx, q[2], color="C0", lw=1.2, label=f"{run.mode} median")
    if obs is not None and np.size(obs) == k:
        ax.plot(idx, np.ravel(obs), "o", color="k", ms=3, label="observed")
    lo, hi = axis_range(np.concatenate([flat.ravel(), np.ravel(obs) if obs is not None else []]))
    ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    ax.set_xlim(-0.5, k - 0.5)
    ax.set_xlabel(f"{node}: component" if k > 12 or labels[0] == f"{node}[0]" else node)
    if k <= 12 and labels[0] != f"{node}[0]":
        ax.set_xticks(idx, labels)
    ax.set_ylabel(node)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(
        f"{run.mode}: {flat.shape[0]} samples of {node}, observed data in black", fontsize=9
    )
    fig.tight_layout()
    return fig


def plot_run(
    run_dir: str | os.PathLike[str],
    mode: str = "posterior",
    output: str | None = None,
    *,
    sample_file: str | None = None,
    force: bool = False,
) -> list[str]:
    """Draw one sample file of a run: its corner plot, and for ``ppd``/``prior`` the
    predictive bands of each observed node in it.

    Args:
        run_dir: the run directory.
        mode: which samples (``posterior`` by default); the newest file of that mode is drawn.
        output: the corner plot's image file (default ``RUN/plots/<mode>.png``); band plots go
            beside it as ``<stem>_<node><ext>``.
        sample_file: draw this ``.npz`` (one of the run's sample files of ``mode``) instead of
            the newest one.
        force: replace image files outside the run that already exist (refused
            otherwise); a name without a suffix gets ``.png``.

    Returns:
        The image files written, the corner plot first (when the file has parameters).

    Raises:
        MissingExtra: matplotlib or corner is not installed.
        ConfigError: not a run directory, ``sample_file`` not one of its sample files, no
            samples, ``names`` that do not fit, or an image file that may not be written
            (:func:`~kestrel.rundir._outputs.check_output_file`).
    """
    from kestrel.rundir._outputs import check_output_file

    run_dir = os.path.expanduser(os.fspath(run_dir))  # ~ expanded as a shell does
    output = None if output is None else os.path.expanduser(output)
    sample_file = None if sample_file is None else os.path.expanduser(sample_file)
    run = read_run_samples(run_dir, mode, sample_file)
    path = output or os.path.join(os.path.abspath(os.fspath(run_dir)), "plots", f"{mode}.png")
    if os.path.isdir(path):
        check_output_file(path, "--image")  # a folder: one line, before a name is made up
    stem, ext = os.path.splitext(path)
    if not ext:  # what matplotlib writes for a name without a suffix
        ext = ".png"
        path = stem + ext
    corner_plot = bool(_parameter_columns(run)[1].size)
    bands = [n for n in run.arrays if n in run.observed] if mode in ("ppd", "prior") else []
    targets = ([path] if corner_plot else []) + [f"{stem}_{node}{ext}" for node in bands]
    for target in targets:  # every file, before any is written
        check_output_file(target, "--image", run_dir=run_dir, force=force)
    plt = _pyplot()
    _corner()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    written: list[str] = []
    if corner_plot:
        fig = corner_figure(run)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for node in bands:
        fig = data_figure(run, node)
        out = f"{stem}_{node}{ext}"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        written.append(out)
    if not written:
        raise KestrelError(f"{run.path}: nothing to plot (nodes: {', '.join(run.arrays)})")
    return written
