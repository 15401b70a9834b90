"""Calibration of a posterior estimator from simulations with known truth (numpy only).

Given ``m`` pairs ``(θ*_i, x*_i)`` simulated from the model and ``L`` posterior draws
``θ_ij ~ q(θ | x*_i)`` each, with the estimator's log density of the draws and of ``θ*_i``:

* **expected coverage of highest-density regions** (Hermans et al. 2022, "A trust crisis in
  simulation-based inference?"): ``θ*_i`` lies in the HPD region of credibility ``c`` iff the
  posterior mass denser than ``q(θ*_i | x*_i)`` is below ``c``
  (:func:`hpd_credibility`). The fraction of the ``m`` truths covered at each level is the
  coverage curve; a calibrated posterior gives coverage ``c`` at level ``c``, an overconfident
  one (too narrow) less, an underconfident one (too wide) more.
* **SBC ranks** (Talts et al. 2018, "Validating Bayesian inference algorithms with
  simulation-based calibration"): per component, the number of draws below the truth
  (:func:`sbc_ranks`), uniform on ``0 … L`` for a calibrated posterior; from them the coverage
  of central marginal intervals per component (:func:`central_coverage`).
* **TARP** (Lemos et al. 2023, "Sampling-based accuracy testing of posterior estimators"):
  coverage of balls around random reference points (:func:`tarp_coverage`), needing no density.

Components that are one constant in every truth and draw (a ``fixed`` prior entry) have no
posterior to calibrate: :func:`calibration_report` lists them as ``fixed`` and leaves them out
of the SBC ranks and TARP (the HPD densities never include them).

Each curve is judged against a binomial band (:func:`binomial_band`): with ``m`` independent
truths, the coverage at level ``c`` of a calibrated posterior is Binomial(m, c) / m. The band is
simultaneous over the levels (Bonferroni), so a calibrated posterior stays inside it with at
least the band's confidence. :func:`verdict` says ``calibrated`` when every level is inside,
else ``overconfident`` or ``underconfident`` by the sign of the deviations outside.

Shape symbols: m truths, L posterior draws per truth, d flattened parameter components,
k levels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kestrel_core._errors import ShapeError

__all__ = [
    "LEVELS",
    "sbc_ranks",
    "hpd_credibility",
    "expected_coverage",
    "central_coverage",
    "tarp_coverage",
    "binomial_band",
    "verdict",
    "rank_bins",
    "constant_components",
    "calibration_report",
]

#: credibility levels of the coverage curves: 0.05, 0.10, …, 0.95
LEVELS: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 20))
#: confidence of the simultaneous binomial band
CONFIDENCE = 0.95


def _as_draws(truth: ArrayLike, samples: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``truth`` as ``(m, d)`` and ``samples`` as ``(m, L, d)`` (components flattened)."""
    t = np.asarray(truth, dtype=np.float64)
    s = np.asarray(samples, dtype=np.float64)
    if t.ndim < 1 or s.ndim < 2 or s.shape[0] != t.shape[0] or s.shape[2:] != t.shape[1:]:
        raise ShapeError(
            f"calibration: truth {t.shape} and samples {s.shape} do not pair up; expected "
            "(m, *D) and (m, L, *D)"
        )
    m, n_draws = s.shape[:2]
    return t.reshape(m, -1), s.reshape(m, n_draws, -1)


def sbc_ranks(truth: ArrayLike, samples: ArrayLike) -> np.ndarray:
    """SBC ranks: per truth and component, how many posterior draws lie below the truth.

    Args:
        truth: ``(m, *D)`` true parameters. samples: ``(m, L, *D)`` posterior draws for each.

    Returns:
        int64 ``(m, d)`` in ``0 … L`` (``d`` = prod(D)); uniform for a calibrated posterior.

    Raises:
        ShapeError: the arrays do not pair up.
    """
    t, s = _as_draws(truth, samples)
    return np.sum(s < t[:, None, :], axis=1).astype(np.int64)


def hpd_credibility(log_prob_truth: ArrayLike, log_prob_samples: ArrayLike) -> np.ndarray:
    """The credibility of the smallest highest-density region that holds each truth.

    The fraction of posterior mass denser than the truth, estimated from the draws' densities
    (ties count half), ``(r + 1/2) / (L + 1)`` for ``r`` draws denser: uniform on (0, 1) for a
    calibrated posterior. A truth of density ``-inf`` (or NaN) gets credibility 1.

    Args:
        log_prob_truth: ``(m,)`` log q(θ*_i | x*_i). log_prob_samples: ``(m, L)`` log q of the
            draws for the same x*_i.

    Returns:
        float64 ``(m,)`` in (0, 1].

    Raises:
        ShapeError: the arrays do not pair up.
    """
    lt = np.asarray(log_prob_truth, dtype=np.float64)
    ls = np.asarray(log_prob_samples, dtype=np.float64)
    if lt.ndim != 1 or ls.ndim != 2 or ls.shape[0] != lt.shape[0]:
        raise ShapeError(
            f"hpd_credibility: log densities {lt.shape} and {ls.shape}; expected (m,) and (m, L)"
        )
    lt = np.where(np.isnan(lt), -np.inf, lt)
    ls = np.where(np.isnan(ls), -np.inf, ls)
    denser = np.sum(ls > lt[:, None], axis=1) + 0.5 * np.sum(ls == lt[:, None], axis=1)
    cred = (denser + 0.5) / (ls.shape[1] + 1)
    return np.asarray(np.where(lt == -np.inf, 1.0, cred), dtype=np.float64)


def expected_coverage(credibility: ArrayLike, levels: Sequence[float] = LEVELS) -> np.ndarray:
    """The fraction of truths inside the region of each credibility level.

    Args:
        credibility: ``(m,)`` the credibility at which each truth enters its region (e.g.
            :func:`hpd_credibility`). levels: ``(k,)`` credibility levels.

    Returns:
        float64 ``(k,)``.
    """
    cred = np.asarray(credibility, dtype=np.float64).reshape(-1)
    lv = np.asarray(levels, dtype=np.float64)
    if cred.size == 0:
        return np.full(lv.shape, np.nan)
    return np.mean(cred[:, None] < lv[None, :], axis=0)


def central_coverage(
    ranks: ArrayLike, n_draws: int, levels: Sequence[float] = LEVELS
) -> np.ndarray:
    """Coverage of central marginal intervals per component, from SBC ranks.

    The truth lies in the central interval of credibility ``c`` when its normalised rank
    ``u = (r + 1/2) / (L + 1)`` is within ``c / 2`` of 1/2.

    Args:
        ranks: int ``(m, d)`` from :func:`sbc_ranks`. n_draws: ``L``. levels: ``(k,)``.

    Returns:
        float64 ``(d, k)``.
    """
    r = np.asarray(ranks, dtype=np.float64)
    u = (r + 0.5) / (int(n_draws) + 1)
    lv = np.asarray(levels, dtype=np.float64)
    inside = np.abs(u - 0.5)[:, :, None] < lv[None, None, :] / 2
    return np.asarray(np.mean(inside, axis=0), dtype=np.float64)


def tarp_coverage(
    truth: ArrayLike,
    samples: ArrayLike,
    levels: Sequence[float] = LEVELS,
    rng: np.random.Generator | None = None,
    references: ArrayLike | None = None,
) -> np.ndarray:
    """TARP expected coverage (Lemos et al. 2023).

    Each truth gets a reference point; ``f_i`` is the fraction of draws closer to it than the
    truth is. Coverage at level ``c`` is the fraction of truths with ``f_i < c``; ``c`` for a
    calibrated posterior. Distances are taken after standardising every component by the
    references' mean and standard deviation.

    The references should come from the prior, as in the paper: with θ* drawn from a narrower
    distribution (a local check from the proposal) references near the truths make even the
    exact posterior look underconfident; references from a prior much wider than the posterior
    turn the statistic into a rank along a random direction, valid there too.

    Args:
        truth: ``(m, *D)``. samples: ``(m, L, *D)``. levels: ``(k,)``.
        rng: draws the reference points when none are given (default: seeded with 0).
        references: ``(m, *D)`` reference points (e.g. prior draws); default: uniform in the
            box the truths span.

    Returns:
        float64 ``(k,)``.

    Raises:
        ShapeError: the arrays do not pair up.
    """
    t, s = _as_draws(truth, samples)
    if references is None:
        rng = np.random.default_rng(0) if rng is None else rng
        lo, hi = t.min(axis=0), t.max(axis=0)
        ref = rng.uniform(size=t.shape) * (hi - lo) + lo
    else:
        ref = np.asarray(references, dtype=np.float64)
        ref = ref.reshape(ref.shape[0], -1) if ref.ndim else ref
        if ref.shape != t.shape:
            raise ShapeError(f"tarp_coverage: references {ref.shape} for truths {t.shape}")
    mean = ref.mean(axis=0)
    std = ref.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    t = (t - mean) / std
    s = (s - mean) / std
    ref = (ref - mean) / std
    d_truth = np.linalg.norm(t - ref, axis=1)
    d_draws = np.linalg.norm(s - ref[:, None, :], axis=2)
    f = np.mean(d_draws < d_truth[:, None], axis=1)
    return expected_coverage(f, levels)


def _binomial_cdf(n: int, p: float) -> np.ndarray:
    """``P(X ≤ k)`` for ``k = 0 … n``, X ~ Binomial(n, p), 0 < p < 1 (log-space pmf)."""
    k = np.arange(n + 1, dtype=np.float64)
    step = np.zeros(n + 1)
    step[1:] = np.log((n - k[:-1]) / k[1:]) + np.log(p / (1 - p))
    log_pmf = n * np.log1p(-p) + np.cumsum(step)
    pmf = np.exp(log_pmf - log_pmf.max())
    return np.asarray(np.cumsum(pmf) / pmf.sum(), dtype=np.float64)


def binomial_band(
    n: int, levels: Sequence[float] = LEVELS, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """Where the coverage of a calibrated posterior lies, from ``n`` independent truths.

    Per level ``c``: the central interval of Binomial(n, c) / n holding ``1 - δ`` of its mass,
    with ``δ = (1 - confidence) / k`` so that the band holds at every level at once with
    probability at least ``confidence``.

    Args:
        n: number of truths (≥ 1). levels: ``(k,)`` in (0, 1). confidence: in (0, 1).

    Returns:
        ``(lower, upper)``, float64 ``(k,)`` each.

    Raises:
        ValueError: ``n`` < 1, or a level or the confidence outside (0, 1).
    """
    lv = np.asarray(levels, dtype=np.float64)
    if n < 1 or not 0 < confidence < 1 or np.any((lv <= 0) | (lv >= 1)):
        raise ValueError(f"binomial_band: n={n}, confidence={confidence}, levels {lv.tolist()}")
    delta = (1 - confidence) / max(len(lv), 1)
    lower, upper = np.empty_like(lv), np.empty_like(lv)
    for i, p in enumerate(lv):
        cdf = _binomial_cdf(int(n), float(p))
        lower[i] = np.searchsorted(cdf, delta / 2) / n
        upper[i] = min(int(np.searchsorted(cdf, 1 - delta / 2)), n) / n
    return lower, upper


def verdict(
    levels: Sequence[float], coverage: ArrayLike, lower: ArrayLike, upper: ArrayLike
) -> str:
    """``calibrated`` when the coverage is inside the band at every level; else
    ``overconfident`` (the levels outside have, in sum, less coverage than their level: regions
    too small) or ``underconfident`` (more: regions too large).

    Args:
        levels, coverage, lower, upper: ``(k,)`` each (NaN coverage counts as inside).

    Returns:
        ``"calibrated"``, ``"overconfident"`` or ``"underconfident"``.
    """
    lv = np.asarray(levels, dtype=np.float64)
    cov = np.asarray(coverage, dtype=np.float64)
    outside = (cov < np.asarray(lower)) | (cov > np.asarray(upper))
    if not np.any(outside):
        return "calibrated"
    return "overconfident" if float(np.sum((cov - lv)[outside])) < 0 else "underconfident"


def _max_deviation(levels: Sequence[float], coverage: np.ndarray) -> float:
    dev = np.abs(np.asarray(coverage) - np.asarray(levels, dtype=np.float64))
    return float(np.nanmax(dev)) if dev.size and np.isfinite(dev).any() else float("nan")


def _rounded(values: ArrayLike, digits: int = 4) -> list[Any]:
    return np.round(np.asarray(values, dtype=np.float64), digits).tolist()


def rank_bins(m: int) -> int:
    """Histogram bins for ``m`` ranks: about 10 truths per bin expected, 2 to 20 bins."""
    return int(min(20, max(2, m // 10)))


def constant_components(truth: ArrayLike, samples: ArrayLike) -> list[int]:
    """The flattened components that are one constant in every truth and every draw (a
    ``fixed`` prior entry): they have no posterior to calibrate (every SBC rank 0, no spread
    for TARP) and are left out of the figures.

    Args:
        truth: ``(m, *D)``. samples: ``(m, L, *D)``.

    Returns:
        The indices ``j`` of the constant components, in order.
    """
    t, s = _as_draws(truth, samples)
    if t.shape[0] == 0:
        return []
    first = t[0]
    same = np.all(t == first, axis=0) & np.all(s == first, axis=(0, 1))
    return [int(j) for j in np.flatnonzero(same)]


def calibration_report(
    truth: ArrayLike,
    samples: ArrayLike,
    log_prob_truth: ArrayLike,
    log_prob_samples: ArrayLike,
    *,
    names: Sequence[str] | None = None,
    levels: Sequence[float] = LEVELS,
    confidence: float = CONFIDENCE,
    rng: np.random.Generator | None = None,
    references: ArrayLike | None = None,
) -> dict[str, Any]:
    """Every calibration figure of one set of simulations, as plain (JSON-ready) values.

    Args:
        truth: ``(m, *D)``. samples: ``(m, L, *D)``. log_prob_truth: ``(m,)``.
        log_prob_samples: ``(m, L)``. names: the ``d`` component labels (default ``θ[i]``).
        levels: credibility levels. confidence: of the binomial band.
        rng: for TARP's reference points. references: TARP's reference points ``(m, *D)``
            (prior draws; see :func:`tarp_coverage`).

    Returns:
        ``{"levels", "coverage", "max_deviation", "verdict", "n", "samples", "band": {"lower",
        "upper", "confidence"}, "fixed": [{"name", "value"}] (the constant components,
        :func:`constant_components`, left out of the ranks and TARP), "ranks": {"names", "bins", "histogram" (d × bins), "values"
        (d × m), "coverage" (d × k), "max_deviation" (d), "verdict" (d)}, "tarp": {"coverage",
        "max_deviation", "verdict"}}``.

    Raises:
        ShapeError: the arrays do not pair up. ValueError: no truths.
    """
    t, s = _as_draws(truth, samples)
    m, n_draws, d = s.shape
    if m < 1:
        raise ValueError("calibration_report: no simulations")
    labels = list(names) if names is not None and len(names) == d else [f"θ[{i}]" for i in range(d)]
    fixed = constant_components(t, s)
    truth_0 = t[0].copy()
    free = [j for j in range(d) if j not in set(fixed)]
    t, s = t[:, free], s[:, :, free]
    lower, upper = binomial_band(m, levels, confidence)
    cred = hpd_credibility(log_prob_truth, log_prob_samples)
    coverage = expected_coverage(cred, levels)
    ranks = sbc_ranks(t, s)
    marginal = central_coverage(ranks, n_draws, levels)
    bins = rank_bins(m)
    edges = np.linspace(0, n_draws + 1, bins + 1)
    histogram = [np.histogram(ranks[:, j], bins=edges)[0].tolist() for j in range(len(free))]
    if references is not None and fixed and np.size(references) == m * d:
        references = np.asarray(references, dtype=np.float64).reshape(m, d)[:, free]
    tarp = tarp_coverage(t, s, levels, rng, references) if free else np.full(len(levels), np.nan)
    return {
        "levels": [float(c) for c in levels],
        "coverage": _rounded(coverage),
        "max_deviation": round(_max_deviation(levels, coverage), 4),
        "verdict": verdict(levels, coverage, lower, upper),
        "n": int(m),
        "samples": int(n_draws),
        "band": {
            "lower": _rounded(lower),
            "upper": _rounded(upper),
            "confidence": float(confidence),
        },
        "fixed": [{"name": labels[j], "value": float(truth_0[j])} for j in fixed],
        "ranks": {
            "names": [labels[j] for j in free],
            "bins": bins,
            "histogram": histogram,
            "values": ranks.T.tolist(),
            "coverage": [_rounded(row) for row in marginal],
            "max_deviation": [round(_max_deviation(levels, row), 4) for row in marginal],
            "verdict": [verdict(levels, row, lower, upper) for row in marginal],
        },
        "tarp": {
            "coverage": _rounded(tarp),
            "max_deviation": round(_max_deviation(levels, tarp), 4),
            "verdict": verdict(levels, tarp, lower, upper),
        },
    }
