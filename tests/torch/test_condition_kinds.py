"""K28: conditions given to an estimator directly pass the boundary rule of observations:
complex arrays and tensors, and masked arrays with masked entries, are refused naming the
node and the condition (never cast to real, never unmasked silently)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from kestrel_core import EstimatorError
from kestrel_torch import GaussianPosterior

from .estimator_helpers import LinearGaussian, filled_store, one_thread  # noqa: F401 (fixture)

LG = LinearGaussian.make()
X_O = LG.simulate(np.array([[0.3, -0.5, 0.8]]), np.random.default_rng(2))

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained() -> GaussianPosterior:
    store = filled_store([LG.prior_block(256, np.random.default_rng(5))], validation=64)
    est = GaussianPosterior(seed=0, max_epochs=1, batch_size=64)
    est.setup(LG.context(seed=1))
    asyncio.run(est.train(store.view()))
    return est


@pytest.mark.parametrize(
    "make", [lambda a: a + 1j, lambda a: torch.tensor(a + 1j)], ids=["numpy", "torch"]
)
def test_k28_complex_condition_rejected(trained, make):
    with pytest.raises(EstimatorError, match=r"condition 'x' has complex dtype.*real numbers"):
        trained.sample_posterior(3, {"x": make(X_O)})


def test_k28_masked_condition_rejected(trained):
    mask = np.zeros(X_O.shape, bool)
    mask[0, 1] = True
    with pytest.raises(EstimatorError, match=r"condition 'x' is a masked array with 1 masked"):
        trained.sample_posterior(3, {"x": np.ma.masked_array(X_O, mask=mask)})
    rng = np.random.default_rng
    got = trained.sample_posterior(3, {"x": np.ma.masked_array(X_O)}, rng=rng(0))["value"]
    np.testing.assert_array_equal(got, trained.sample_posterior(3, {"x": X_O}, rng=rng(0))["value"])
