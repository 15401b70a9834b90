"""Truncated proposals (TSNPE): the threshold and the truncated prior's draws, against a case
whose region is known in closed form: a uniform prior on [-5, 5]² and q = N(0, 0.5² I), whose
``1 − ε`` highest-density region is the disc of radius 0.5 √(−2 log ε)."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_torch.estimators._truncation import hpr_threshold, sample_truncated

SIGMA, LOW, HIGH, EPS = 0.5, -5.0, 5.0, 1e-3
RADIUS = SIGMA * np.sqrt(-2.0 * np.log(EPS))


def log_prior(theta):
    inside = np.all((theta >= LOW) & (theta <= HIGH), axis=-1)
    return np.where(inside, -2.0 * np.log(HIGH - LOW), -np.inf)


def log_q(theta):
    return -0.5 * np.sum(theta**2, axis=-1) / SIGMA**2 - np.log(2.0 * np.pi * SIGMA**2)


def make_draws(seed):
    rng = np.random.default_rng(seed)

    def prior(k):
        theta = rng.uniform(LOW, HIGH, size=(k, 2))
        return {"value": theta, "log_prob": log_prior(theta)}

    def posterior(k):
        theta = SIGMA * rng.standard_normal((k, 2))
        return {"value": theta, "log_prob": log_q(theta)}

    return prior, posterior


def test_the_threshold_encloses_one_minus_epsilon_of_q():
    _, posterior = make_draws(0)
    tau = hpr_threshold(posterior(200_000)["log_prob"], EPS)
    radius = np.sqrt(-2.0 * SIGMA**2 * (tau + np.log(2.0 * np.pi * SIGMA**2)))
    assert radius == pytest.approx(RADIUS, rel=0.03)


@pytest.mark.parametrize("epsilon", [0.0, 1.0, -0.1, 2.0])
def test_a_quantile_outside_zero_one_is_refused(epsilon):
    with pytest.raises(ValueError, match=r"truncation quantile: expected a number in \(0, 1\)"):
        hpr_threshold(np.zeros(10), epsilon)


def test_non_finite_log_q_counts_below_every_finite_one():
    log_q_values = np.array([-np.inf] * 5 + list(np.arange(95.0)))
    assert hpr_threshold(log_q_values, 0.05) == -np.inf
    assert hpr_threshold(log_q_values, 0.1) == 4.0
    with pytest.raises(ValueError, match="every draw of the posterior has log q = -inf"):
        hpr_threshold(np.full(3, -np.inf), 0.5)


def _check_uniform_on_the_disc(theta, tau_radius, tolerance):
    r2 = np.sum(theta**2, axis=-1)
    assert r2.max() <= tau_radius**2 * (1 + 1e-9)
    # uniform on a disc: r² is uniform on [0, R²] and the mean is the centre
    assert np.mean(r2) / tau_radius**2 == pytest.approx(0.5, abs=tolerance)
    assert np.abs(theta.mean(0)).max() < 2.5 * tolerance


def test_rejection_draws_the_prior_inside_the_region():
    prior, posterior = make_draws(1)
    tau = log_q(np.array([[RADIUS, 0.0]]))[0]
    record, stats = sample_truncated(
        5000, prior, log_prior, posterior, log_q, tau, np.random.default_rng(2),
        max_candidates=10**7,
    )  # fmt: skip
    assert record["value"].shape == (5000, 2) and stats.resampled == 0
    _check_uniform_on_the_disc(record["value"], RADIUS, 0.02)  # iid: r²/R² has σ 0.004
    np.testing.assert_array_equal(record["log_prob"], log_prior(record["value"]))
    area = np.pi * RADIUS**2 / (HIGH - LOW) ** 2
    assert stats.acceptance == pytest.approx(area, rel=0.1)


def test_a_region_too_small_for_rejection_is_drawn_by_resampling_from_q():
    prior, posterior = make_draws(3)
    tau = log_q(np.array([[RADIUS, 0.0]]))[0]
    record, stats = sample_truncated(
        3000, prior, log_prior, posterior, log_q, tau, np.random.default_rng(4),
        max_candidates=1000,
    )  # fmt: skip
    assert stats.candidates == 1000 and 0 < stats.resampled < 3000
    assert record["value"].shape == (3000, 2)
    # resampled with weights p/q up to 1/ε apart: an effective sample of a few hundred
    _check_uniform_on_the_disc(record["value"][-stats.resampled :], RADIUS, 0.05)


def test_the_same_seeds_give_the_same_draws():
    runs = []
    for _ in range(2):
        prior, posterior = make_draws(5)
        record, _ = sample_truncated(
            100, prior, log_prior, posterior, log_q, 0.0, np.random.default_rng(6),
            max_candidates=500,
        )  # fmt: skip
        runs.append(record["value"])
    np.testing.assert_array_equal(runs[0], runs[1])
