"""K45: a posterior's ``log_prob`` is −inf outside the prior's support, row by row, never an
``OutOfSupportError`` — as MCMC and importance weights need; finite values inside unchanged."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kestrel_core import EstimatorContext, InMemoryStore, Product
from kestrel_torch import FlowLikelihood, FlowMatchingPosterior, FlowPosterior, GaussianPosterior

from .estimator_helpers import one_thread  # noqa: F401 (fixture)

PRIOR = Product([["uniform", -1.0, 1.0]] * 2)
SIGMA = 0.1
X_O = np.array([0.3, -0.2])
#: estimators and a few epochs each: the test is about support, not accuracy
ESTIMATORS = {
    "FlowPosterior": (FlowPosterior, {"transforms": 1, "hidden_features": (16, 16)}),
    "GaussianPosterior": (GaussianPosterior, {}),
    "FlowMatchingPosterior": (FlowMatchingPosterior, {"hidden_features": (16,), "ode_steps": 4}),
    "FlowLikelihood": (FlowLikelihood, {"transforms": 1, "hidden_features": (16, 16)}),
}
#: rows outside the support (or not numbers) and inside it (a bound included)
OUTSIDE = np.array([[1.5, 0.0], [0.0, -1.0001], [np.nan, 0.0], [np.inf, 0.0], [-np.inf, 0.2]])
INSIDE = np.array([[0.3, -0.2], [0.0, 0.0], [-1.0, 1.0], [0.9, 0.1], [-0.5, 0.7]])

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=sorted(ESTIMATORS))
def trained(request: pytest.FixtureRequest, one_thread: None):  # noqa: F811 (fixture argument)
    cls, options = ESTIMATORS[request.param]
    rng = np.random.default_rng(0)
    theta = PRIOR.sample(512, rng)
    block = {
        "theta.value": theta,
        "theta.log_prob": PRIOR.log_prob(theta),
        "x.value": theta + SIGMA * rng.normal(size=theta.shape),
    }
    store = InMemoryStore(min_samples=0, max_samples=512, validation_samples=128)
    store.append(block, 512)
    est = cls(seed=0, max_epochs=2, **options)
    est.setup(EstimatorContext(node="theta", prior=PRIOR, evidence=("x",), seed=3))
    asyncio.run(est.train(store.view()))
    return est


def test_k45_log_prob_outside_the_prior_support_is_minus_inf(trained) -> None:
    got = trained.log_prob(np.array([[1.5, 0.0]]), {"x": X_O[None]})
    assert got.shape == (1,) and got.dtype == np.float64 and got[0] == -np.inf
    assert np.isfinite(trained.log_prob(np.array([[0.5, 0.0]]), {"x": X_O[None]})).all()


def test_k45_each_row_is_judged_alone_and_the_rows_inside_are_unchanged(trained) -> None:
    mixed = np.empty((10, 2))
    mixed[0::2], mixed[1::2] = OUTSIDE, INSIDE
    got = trained.log_prob(mixed, {"x": X_O[None]})
    assert np.all(got[0::2] == -np.inf)
    assert np.isfinite(got[1::2]).all()
    # the rows inside, bit for bit as in a batch of the same size without the rows outside
    alone = np.repeat(INSIDE, 2, axis=0)
    assert np.array_equal(got[1::2], trained.log_prob(alone, {"x": X_O[None]})[1::2])
    # per-sample conditions too (one x per row; a broadcast one is embedded once, so the last
    # bits may differ)
    per_row = trained.log_prob(mixed, {"x": np.repeat(X_O[None], 10, axis=0)})
    assert np.all(per_row[0::2] == -np.inf)
    np.testing.assert_allclose(per_row[1::2], got[1::2], rtol=1e-5)


def test_k45_a_batch_entirely_outside_is_all_minus_inf(trained) -> None:
    got = trained.log_prob(OUTSIDE, {"x": X_O[None]})
    assert got.shape == (5,) and np.all(got == -np.inf)
