"""Calibration figures (kestrel_core.diagnostics._calibration): SBC ranks, HPD coverage, TARP, verdict.

A conjugate Gaussian model with a known posterior: θ ~ N(0, 1) per component,
x = θ + N(0, s²); the posterior is N(x / (1 + s²), s² / (1 + s²)). Draws from it are
calibrated; the same draws scaled narrower are overconfident, wider underconfident.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from kestrel_core import ShapeError
from kestrel_core.diagnostics._calibration import (
    LEVELS,
    binomial_band,
    calibration_report,
    central_coverage,
    expected_coverage,
    hpd_credibility,
    sbc_ranks,
    tarp_coverage,
    verdict,
)

S2 = 0.25


def gaussian_case(scale: float, m: int = 400, draws: int = 300, d: int = 2, seed: int = 0):
    """Truths, posterior draws (σ times ``scale``) and their log densities."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(m, d))
    x = theta + rng.normal(size=(m, d)) * np.sqrt(S2)
    mean = x / (1 + S2)
    sd = np.sqrt(S2 / (1 + S2)) * scale
    samples = mean[:, None, :] + sd * rng.normal(size=(m, draws, d))

    def log_prob(t, mu):
        return np.sum(-0.5 * ((t - mu) / sd) ** 2 - np.log(sd), axis=-1)

    return theta, samples, log_prob(theta, mean), log_prob(samples, mean[:, None, :])


@pytest.mark.parametrize(
    ("scale", "expected"),
    [(1.0, "calibrated"), (0.6, "overconfident"), (1.6, "underconfident")],
)
def test_verdict_of_a_known_gaussian_posterior(scale, expected):
    report = calibration_report(*gaussian_case(scale), rng=np.random.default_rng(1))
    assert report["verdict"] == expected
    assert report["tarp"]["verdict"] == expected
    assert report["ranks"]["verdict"] == [expected, expected]
    if expected == "calibrated":
        assert report["max_deviation"] <= 0.07
    else:
        assert report["max_deviation"] > 0.1
    cov = np.array(report["coverage"])
    lv = np.array(LEVELS)
    assert {"calibrated": True, "overconfident": (cov <= lv + 0.02).all()}.get(expected, True)
    assert expected != "underconfident" or (cov >= lv - 0.02).all()


def test_report_fields_are_json_and_sized():
    report = calibration_report(*gaussian_case(1.0, m=50, draws=40, d=3), names=["a", "b", "c"])
    text = json.dumps(report)
    assert json.loads(text) == report
    k = len(LEVELS)
    assert report["levels"] == list(LEVELS) and len(report["coverage"]) == k
    assert report["n"] == 50 and report["samples"] == 40
    assert len(report["band"]["lower"]) == k == len(report["band"]["upper"])
    ranks = report["ranks"]
    assert ranks["names"] == ["a", "b", "c"]
    assert np.array(ranks["values"]).shape == (3, 50)
    assert np.array(ranks["histogram"]).shape == (3, ranks["bins"])
    assert np.array(ranks["histogram"]).sum(axis=1).tolist() == [50, 50, 50]
    assert np.array(ranks["coverage"]).shape == (3, k)
    assert len(report["tarp"]["coverage"]) == k


def test_ranks_and_credibility_by_hand():
    truth = np.array([[0.5], [10.0]])
    samples = np.array([[[0.0], [1.0], [2.0]], [[0.0], [1.0], [2.0]]])
    assert sbc_ranks(truth, samples).tolist() == [[1], [3]]
    # 1 of 3 draws denser than the first truth; the second has no density (-inf): credibility 1
    cred = hpd_credibility([-1.0, -np.inf], [[0.0, -2.0, -3.0], [0.0, -1.0, np.nan]])
    assert cred.tolist() == [1.5 / 4, 1.0]
    assert expected_coverage(cred, [0.3, 0.5, 0.9]).tolist() == [0.0, 0.5, 0.5]
    # central intervals: rank 1 of 3 draws → u = 0.375, inside the 50 % interval (|u - ½| < ¼)
    assert central_coverage([[1]], 3, [0.2, 0.5]).tolist() == [[0.0, 1.0]]


def test_binomial_band_holds_a_calibrated_coverage():
    lower, upper = binomial_band(200)
    lv = np.array(LEVELS)
    assert (lower < lv).all() and (upper > lv).all()
    half = (upper - lower)[LEVELS.index(0.5)] / 2
    assert 0.08 < half < 0.13  # Bonferroni over 19 levels: z ≈ 3.0, σ = 0.035 at n = 200
    # a calibrated coverage stays inside the band in ≥ 95 % of repetitions
    rng = np.random.default_rng(3)
    inside = 0
    for _ in range(200):
        cov = expected_coverage(rng.uniform(size=200))
        inside += verdict(LEVELS, cov, lower, upper) == "calibrated"
    assert inside >= 190


def test_tarp_is_calibrated_for_exact_draws_and_reproducible():
    theta, samples, _, _ = gaussian_case(1.0, m=300, draws=200)
    a = tarp_coverage(theta, samples, rng=np.random.default_rng(5))
    b = tarp_coverage(theta, samples, rng=np.random.default_rng(5))
    assert a.tolist() == b.tolist()
    assert np.max(np.abs(a - np.array(LEVELS))) < 0.1


def test_tarp_of_a_local_check_takes_its_references_from_a_wide_prior():
    # θ* from a narrow proposal N(0, 1.8²), x = θ* + N(0, 1), the flat-prior posterior N(x, 1):
    # frequentist-calibrated; references near the truths read it as underconfident, references
    # from a prior 30 times wider do not
    rng = np.random.default_rng(2)
    m, d = 600, 4
    theta = 1.8 * rng.normal(size=(m, d))
    x = theta + rng.normal(size=(m, d))
    draws = x[:, None, :] + rng.normal(size=(m, 300, d))
    lv = np.array(LEVELS)
    near = tarp_coverage(theta, draws, rng=rng)
    wide = tarp_coverage(theta, draws, references=30 * rng.normal(size=(m, d)))
    assert np.max(np.abs(near - lv)) > 0.15 and np.max(np.abs(wide - lv)) < 0.07
    with pytest.raises(ShapeError, match="references"):
        tarp_coverage(theta, draws, references=np.zeros((3, d)))


def test_shapes_that_do_not_pair_up_are_refused():
    with pytest.raises(ShapeError, match=r"truth \(3, 2\) and samples \(4, 5, 2\)"):
        sbc_ranks(np.zeros((3, 2)), np.zeros((4, 5, 2)))
    with pytest.raises(ShapeError, match="log densities"):
        hpd_credibility(np.zeros(3), np.zeros((2, 5)))
    with pytest.raises(ValueError):
        binomial_band(0)


def test_a_fixed_component_is_left_out_of_ranks_and_tarp(tmp_path):
    # a `fixed` prior entry: one constant in every truth and draw, no density of its own
    theta, samples, lp_truth, lp_draws = gaussian_case(1.0, m=200, draws=100)
    refs = np.random.default_rng(4).normal(size=theta.shape) * 3
    base = calibration_report(theta, samples, lp_truth, lp_draws, names=["a", "b"], references=refs)
    with_fixed = calibration_report(
        np.insert(theta, 1, 2.0, axis=1),
        np.insert(samples, 1, 2.0, axis=2),
        lp_truth,
        lp_draws,
        names=["a", "fix", "b"],
        references=np.insert(refs, 1, 2.0, axis=1),
    )
    assert with_fixed["fixed"] == [{"name": "fix", "value": 2.0}] and base["fixed"] == []
    assert with_fixed["ranks"]["names"] == ["a", "b"]
    assert with_fixed["ranks"]["verdict"] == ["calibrated", "calibrated"]
    for key in ("ranks", "tarp", "verdict", "coverage", "max_deviation"):
        assert with_fixed[key] == base[key], key
    assert json.loads(json.dumps(with_fixed)) == with_fixed
    # a component that varies in the truths (or the draws) is not fixed
    varying = np.insert(samples, 1, 2.0, axis=2)
    varying[0, 0, 1] = 2.5
    report = calibration_report(np.insert(theta, 1, 2.0, axis=1), varying, lp_truth, lp_draws)
    assert report["fixed"] == [] and len(report["ranks"]["names"]) == 3
    if all(importlib.util.find_spec(m) for m in ("matplotlib", "kestrel")):
        from kestrel.check._figure import calibration_figure

        calibration_figure(with_fixed, tmp_path / "calibration.png")
        assert (tmp_path / "calibration.png").stat().st_size > 10_000
