"""A correlated Gaussian prior (kestrel_core.MultivariateNormal) under GaussianPosterior (issue 14
item 4): the estimator recovers the analytic posterior of a linear-Gaussian model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kestrel_core import EstimatorContext, MultivariateNormal
from kestrel_torch import GaussianPosterior

from .estimator_helpers import filled_store, one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

MEAN = np.array([0.5, -0.5, 1.0])
COV = np.array([[1.0, 0.7, 0.2], [0.7, 1.0, 0.4], [0.2, 0.4, 0.5]])
A = np.random.default_rng(0).normal(size=(5, 3)) / np.sqrt(3)
SIGMA = 0.3


def test_gaussian_posterior_on_a_correlated_prior_matches_the_analytic_posterior() -> None:
    prior = MultivariateNormal(MEAN, COV)
    rng = np.random.default_rng(1)
    theta = prior.sample(4096, rng)
    x = theta @ A.T + SIGMA * rng.normal(size=(4096, 5))
    store = filled_store(
        [{"theta.value": theta, "theta.log_prob": prior.log_prob(theta), "x.value": x}]
    )
    est = GaussianPosterior(max_epochs=40, seed=0)
    est.setup(EstimatorContext(node="theta", prior=prior, evidence=("x",), seed=1))
    asyncio.run(est.train(store.view()))

    theta_o = np.array([0.8, 0.0, 1.2])
    x_o = theta_o @ A.T
    prec = A.T @ A / SIGMA**2 + np.linalg.inv(COV)
    cov = np.linalg.inv(prec)
    mean = cov @ (A.T @ x_o / SIGMA**2 + np.linalg.solve(COV, MEAN))

    draws = est.sample_posterior(20000, {"x": x_o[None]})["value"]
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(0) - mean) <= 0.1 * sd), (draws.mean(0) - mean) / sd
    assert np.all(np.abs(draws.std(0) / sd - 1.0) <= 0.1), draws.std(0) / sd
