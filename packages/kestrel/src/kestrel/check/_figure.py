"""The figure of a calibration report (``RUN/checks/calibration.png``).

Left: the expected coverage of highest-density regions and TARP's against the credibility
level, with the diagonal (calibrated) and the simultaneous binomial band a calibrated posterior
stays in. Right: the SBC rank histogram of each component (at most :data:`MAX_PANELS`), the
expected count per bin (dashed) and its 99 % binomial range (shaded over the bars). matplotlib is optional
(``pip install 'kestrel[plot]'``): without it :func:`calibration_figure` raises
:class:`~kestrel.plot._plot.MissingExtra`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from kestrel_core import binomial_band

__all__ = ["calibration_figure", "MAX_PANELS"]

#: rank histograms drawn at most (the first components)
MAX_PANELS = 12


def _pyplot() -> ModuleType:
    from kestrel.plot._plot import MissingExtra

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra(
            "the calibration figure needs matplotlib: pip install 'kestrel[plot]'"
        ) from None
    return plt


def calibration_figure(report: Mapping[str, Any], path: str | os.PathLike[str]) -> str:
    """Draw a report of :func:`~kestrel_core.diagnostics._calibration.calibration_report` to ``path``.

    Args:
        report: the report (as written to ``calibration.json``). path: the image (``.png``).

    Returns:
        The path written.

    Raises:
        MissingExtra: matplotlib is not installed.
    """
    plt = _pyplot()
    ranks = report["ranks"]
    hist = np.asarray(ranks["histogram"], dtype=np.float64)
    panels = min(len(hist), MAX_PANELS)
    cols = min(4, max(panels, 1))
    rows = max(1, math.ceil(panels / cols))
    fig = plt.figure(figsize=(4.2 + 2.4 * cols, max(3.6, 2.0 * rows)), layout="constrained")
    grid = fig.add_gridspec(rows, 1 + cols, width_ratios=[1.8] + [1.0] * cols)
    ax = fig.add_subplot(grid[:, 0])
    levels = np.asarray(report["levels"])
    band = report["band"]
    ax.fill_between(
        levels, band["lower"], band["upper"], color="0.85", label=f"{band['confidence']:.0%} band"
    )
    ax.plot([0, 1], [0, 1], color="0.4", lw=1, ls="--")
    ax.plot(levels, report["coverage"], "o-", ms=3, color="C0", label="HPD coverage")
    ax.plot(levels, report["tarp"]["coverage"], "s-", ms=3, color="C1", label="TARP")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("credibility level")
    ax.set_ylabel("expected coverage")
    ax.set_title(
        f"{report['verdict']} (max dev. {report['max_deviation']:.3f}, n={report['n']})",
        fontsize=10,
    )
    ax.legend(loc="upper left", fontsize=8)
    if report.get("fixed"):
        fixed = ", ".join(f"{f['name']} = {f['value']:g}" for f in report["fixed"])
        ax.set_xlabel(f"credibility level\n(fixed, left out: {fixed})")
    n, bins = int(report["n"]), int(ranks["bins"])
    expected = n / bins
    lo, hi = binomial_band(n, [1 / bins], 0.99)
    for j in range(panels):
        sub = fig.add_subplot(grid[j // cols, 1 + j % cols])
        sub.bar(np.arange(bins), hist[j], width=1.0, align="edge", color="C0", alpha=0.7)
        sub.axhspan(lo[0] * n, hi[0] * n, color="0.5", alpha=0.25, lw=0, zorder=3)
        sub.axhline(expected, color="0.3", lw=1, ls="--", zorder=4)
        sub.set_xlim(0, bins)
        sub.set_xticks([])
        sub.set_title(f"{ranks['names'][j]}: {ranks['verdict'][j]}", fontsize=8)
        sub.tick_params(labelsize=7)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)
