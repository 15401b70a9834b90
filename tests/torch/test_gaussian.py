"""GaussianPosterior against analytic posteriors: recovery, proposal correction, tempering, precision."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
import torch

from kestrel_core import EstimatorContext, EstimatorError, InMemoryStore, Product
from kestrel_torch import GaussianPosterior
from kestrel_torch.estimators._correction import gaussian_posterior

from .estimator_helpers import LinearGaussian, filled_store, mvn_logpdf, one_thread  # noqa: F401 (fixture)

LG = LinearGaussian.make()
THETA_O = np.array([[0.3, -0.5, 0.8]])
X_O = LG.simulate(THETA_O, np.random.default_rng(2))[0]
SD = np.sqrt(np.diag(LG.cov))

pytestmark = pytest.mark.usefixtures("one_thread")


def trained_on(blocks: list[dict[str, np.ndarray]], **kwargs) -> GaussianPosterior:
    est = GaussianPosterior(**{"max_epochs": 40, "seed": 0, **kwargs})
    est.setup(LG.context())
    asyncio.run(est.train(filled_store(blocks).view()))
    return est


@pytest.fixture(scope="module")
def trained(one_thread: None) -> GaussianPosterior:  # noqa: F811 (fixture argument)
    """Trained on 4096 prior draws (3840 training, 256 validation)."""
    return trained_on([LG.prior_block(4096, np.random.default_rng(100))])


def check_gaussian(
    values: np.ndarray,
    mean: np.ndarray,
    cov: np.ndarray,
    *,
    mean_tol: float = 0.1,
    sd_tol: float = 0.1,
) -> None:
    """Sample mean within ``mean_tol`` σ, σ within ``sd_tol``, correlations within 0.1."""
    sd = np.sqrt(np.diag(cov))
    m, c = values.mean(0), np.cov(values.T)
    assert np.all(np.abs(m - mean) <= mean_tol * sd), (m - mean) / sd
    assert np.all(np.abs(np.sqrt(np.diag(c)) / sd - 1.0) <= sd_tol), np.sqrt(np.diag(c)) / sd
    assert np.allclose(
        c / np.outer(np.sqrt(np.diag(c)), np.sqrt(np.diag(c))), cov / np.outer(sd, sd), atol=0.1
    )


def check_log_prob(record: dict[str, np.ndarray]) -> None:
    """``log_prob`` is the density of the Gaussian the values were drawn from (its sample moments)."""
    values = record["value"]
    expected = mvn_logpdf(values, values.mean(0), np.cov(values.T))
    assert np.median(np.abs(record["log_prob"] - expected)) < 0.02


def test_recovers_the_linear_gaussian_posterior(trained: GaussianPosterior) -> None:
    rec = trained.sample_posterior(20000, {"x": X_O[None]})
    assert rec["value"].shape == (20000, 3) and rec["value"].dtype == np.float64
    assert rec["log_prob"].shape == (20000,) and rec["log_prob"].dtype == np.float64
    check_gaussian(rec["value"], LG.mean(X_O), LG.cov)
    check_log_prob(rec)
    # log_prob() evaluates the same density the sampler reports
    np.testing.assert_allclose(
        trained.log_prob(rec["value"][:64], {"x": X_O[None]}),
        rec["log_prob"][:64],
        rtol=0,
        atol=1e-8,
    )


def test_proposal_is_the_analytic_tempered_posterior(trained: GaussianPosterior) -> None:
    gamma = trained.config["gamma"]
    mean, cov = LG.tempered(X_O, gamma)
    rec = trained.sample_proposal(20000, {"x": X_O[None]})
    check_gaussian(rec["value"], mean, cov)
    check_log_prob(rec)
    # the oracle: wider than the posterior, narrower than the prior
    assert np.all(np.sqrt(np.diag(cov)) > SD)
    assert np.all(np.sqrt(np.diag(cov)) < 1.0)


def test_correction_with_a_buffer_half_from_a_narrow_proposal() -> None:
    # Half the buffer comes from the posterior at x_o itself. Without a correction the fit at x_o
    # sees a prior of N(posterior), i.e. twice the posterior precision: σ would be 0.71 of the
    # truth, far outside the 10 % allowed below.
    rng = np.random.default_rng(101)
    mean, cov = LG.tempered(X_O, 1.0)
    est = trained_on([LG.prior_block(4096, rng), LG.gaussian_block(4096, mean, cov, rng)], seed=1)
    # the mean within 0.15 σ: 40 epochs leave a bias near 0.1 σ (0.1005 σ in a fresh environment on
    # 2026-12-01, within 0.1 σ in CI before: a tolerance at the bias fails on rounding); what the correction
    # fixes, σ, keeps its 10 %
    check_gaussian(
        est.sample_posterior(20000, {"x": X_O[None]})["value"], LG.mean(X_O), LG.cov, mean_tol=0.15
    )


def test_closed_form_tempering_matches_brute_force() -> None:
    # π · (q / r)^γ on a grid in 1-D, against the closed form
    mean_q, var_q, m_r, var_r, gamma = 0.7, 0.04, 0.3, 0.5, 0.4
    f = gaussian_posterior(
        torch.tensor([[mean_q]], dtype=torch.float64),
        torch.tensor([[var_q]], dtype=torch.float64),
        torch.tensor([m_r], dtype=torch.float64),
        torch.tensor([[var_r]], dtype=torch.float64),
        gamma,
    )
    z = np.linspace(-4, 4, 40001)
    log_t = -0.5 * z**2 + gamma * (-0.5 * (z - mean_q) ** 2 / var_q + 0.5 * (z - m_r) ** 2 / var_r)
    w = np.exp(log_t - log_t.max())
    w /= w.sum()
    mean = (w * z).sum()
    assert float(f.mean[0, 0]) == pytest.approx(mean, abs=1e-6)
    assert float(f.covariance[0, 0]) == pytest.approx((w * (z - mean) ** 2).sum(), rel=1e-5)
    log_p = f.log_prob(torch.tensor(z[::4000, None])).numpy()
    expected = -0.5 * (z[::4000] - mean) ** 2 / float(f.covariance[0, 0]) - 0.5 * np.log(
        2 * np.pi * float(f.covariance[0, 0])
    )
    np.testing.assert_allclose(log_p, expected, atol=1e-9)


def test_non_informative_direction_is_clipped_and_reported() -> None:
    # q wider than r in the second direction: no information there, so the prior is kept
    f = gaussian_posterior(
        torch.tensor([[0.5, 3.0]], dtype=torch.float64),
        torch.diag(torch.tensor([0.01, 2.0], dtype=torch.float64)),
        torch.zeros(2, dtype=torch.float64),
        torch.eye(2, dtype=torch.float64),
        1.0,
    )
    assert f.clipped == 1
    assert float(f.covariance[1, 1]) == pytest.approx(1.0)
    assert float(f.mean[0, 1]) == pytest.approx(0.0, abs=1e-12)
    assert float(f.covariance[0, 0]) == pytest.approx(1.0 / (1.0 / 0.01 - 1.0 + 1.0))


def test_broadcast_and_per_sample_conditions_agree(trained: GaussianPosterior) -> None:
    theta = trained.sample_posterior(256, {"x": X_O[None]})["value"]
    broadcast = trained.log_prob(theta, {"x": X_O[None]})
    # equal up to float32 rounding: the embedding runs on 1 row or on 256, and BLAS picks its
    # kernel by shape and CPU (seen: 2e-6 apart on one machine, identical on another; 1.7e-6
    # at a log density of 0.01 on an AVX-512 CPU). A wrong broadcast is O(1) off.
    close = {"rtol": 1e-5, "atol": 1e-5}
    np.testing.assert_allclose(
        trained.log_prob(theta, {"x": np.repeat(X_O[None], 256, 0)}), broadcast, **close
    )
    np.testing.assert_allclose(
        trained.log_prob(theta, {"x": np.broadcast_to(X_O, (256, 5))}), broadcast, **close
    )
    # n = 1 draws from the same distribution as n = 256
    one = np.concatenate(
        [trained.sample_posterior(1, {"x": X_O[None]})["value"] for _ in range(200)]
    )
    assert np.all(np.abs(one.mean(0) - LG.mean(X_O)) < 0.35 * SD)
    assert trained.sample_posterior(0, {"x": X_O[None]})["value"].shape == (0, 3)


def test_condition_errors_name_the_condition(trained: GaussianPosterior) -> None:
    with pytest.raises(
        EstimatorError,
        match=r"condition 'x' has leading dimension 5; expected 1 \(broadcast\) or 100",
    ):
        trained.sample_posterior(100, {"x": np.zeros((5, 5))})
    with pytest.raises(EstimatorError, match=r"condition 'x' is missing"):
        trained.sample_posterior(10, {"y": np.zeros((1, 5))})
    with pytest.raises(
        EstimatorError, match=r"condition 'x' has shape \(1, 4\); expected \(1, 5\)"
    ):
        trained.sample_posterior(10, {"x": np.zeros((1, 4))})


def test_untrained_estimator_proposes_from_the_prior() -> None:
    est = GaussianPosterior()
    est.setup(LG.context())
    rec = est.sample_proposal(2000, {"x": X_O[None]})
    np.testing.assert_allclose(rec["log_prob"], LG.prior.log_prob(rec["value"]))
    assert np.all(np.abs(rec["value"].std(0) - 1.0) < 0.1)
    prior = est.sample_prior(5)
    assert prior["value"].shape == (5, 3)
    np.testing.assert_allclose(prior["log_prob"], LG.prior.log_prob(prior["value"]))
    with pytest.raises(EstimatorError, match="sample_posterior needs a trained model"):
        est.sample_posterior(3, {"x": X_O[None]})


def test_prior_epochs_keep_proposals_at_the_prior() -> None:
    rng = np.random.default_rng(3)
    store = filled_store([LG.prior_block(1024, rng)])
    est = GaussianPosterior(max_epochs=2, prior_epochs=3, seed=0)
    est.setup(LG.context())
    asyncio.run(est.train(store.view()))
    rec = est.sample_proposal(500, {"x": X_O[None]})
    np.testing.assert_allclose(rec["log_prob"], LG.prior.log_prob(rec["value"]))
    est.options = dataclasses.replace(est.options, max_epochs=4)  # a total: 2 more
    asyncio.run(est.train(store.view()))  # total_epochs 4 >= prior_epochs
    assert est.total_epochs == 4
    rec = est.sample_proposal(500, {"x": X_O[None]})
    assert np.all(rec["value"].std(0) < 0.8)


def test_float64_precision_of_a_narrow_posterior() -> None:
    # Example 04's regime: z ~ N(0, I_3), x = exp(z) + N(0, 1e-6²), x_o = exp([-5, 0, 5]); the
    # posterior N(ln x_o, (1e-6/x_o)²) has σ from 1.5e-4 down to 6.7e-9. The buffer comes from a
    # proposal 10 σ wide around the truth (stored densities), as late in a sequential run.
    sigma, z_o = 1e-6, np.array([-5.0, 0.0, 5.0])
    x_o = np.exp(z_o)
    post_sd = sigma / x_o
    prior = Product([["normal", 0.0, 1.0]] * 3)
    rng = np.random.default_rng(4)
    n = 4096
    z = z_o + 10 * post_sd * rng.normal(size=(n, 3))
    log_q = (
        -0.5 * ((z - z_o) / (10 * post_sd)) ** 2 - np.log(10 * post_sd) - 0.5 * np.log(2 * np.pi)
    ).sum(1)
    x = np.exp(z) + sigma * rng.normal(size=(n, 3))
    store = InMemoryStore(min_samples=0, max_samples=n, validation_samples=256)
    store.append({"z.value": z, "z.log_prob": log_q, "x.value": x}, n)
    est = GaussianPosterior(max_epochs=60, seed=0)
    est.setup(EstimatorContext(node="z", prior=prior, evidence=("x",), seed=0))
    asyncio.run(est.train(store.view()))
    values = est.sample_posterior(20000, {"x": x_o[None]})["value"]
    assert np.all(np.abs(values.mean(0) - np.log(x_o)) < 0.2 * post_sd), (
        values.mean(0) - np.log(x_o)
    ) / post_sd
    assert np.all(np.abs(values.std(0) / post_sd - 1.0) < 0.15), values.std(0) / post_sd
