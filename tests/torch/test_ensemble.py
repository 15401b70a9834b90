"""EnsemblePosterior: the mixture of trained members weighted by validation log-probability,
on a 2-D linear-Gaussian task with an analytic posterior, and its checkpoint format."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kestrel_torch import EnsemblePosterior, GaussianPosterior
from kestrel_torch._errors import CheckpointError, EstimatorError
from kestrel_torch.estimators._ensemble import ensemble_weights, pack_members, unpack_members

from .estimator_helpers import (
    LinearGaussian,
    filled_store,
    mvn_logpdf,
    one_thread,  # noqa: F401 (fixture)
)

LG = LinearGaussian.make(d=2, k=2, seed=3)
X_O = np.array([0.4, -0.3])
pytestmark = pytest.mark.usefixtures("one_thread")


def member(seed: int, store) -> GaussianPosterior:
    est = GaussianPosterior(max_epochs=30, seed=seed)
    est.setup(LG.context())
    asyncio.run(est.train(store.view()))
    return est


@pytest.fixture(scope="module")
def members(one_thread: None) -> list[GaussianPosterior]:  # noqa: F811 (fixture argument)
    store = filled_store([LG.prior_block(2048, np.random.default_rng(11))])
    return [member(seed, store) for seed in (0, 1, 2)]


def test_weights_are_the_softmax_of_the_validation_log_probs(members) -> None:
    ens = EnsemblePosterior(members)
    losses = np.array([m.status()["best_val_loss"] for m in members])
    expected = np.exp(-losses - (-losses).max())
    np.testing.assert_allclose(ens.weights, expected / expected.sum())
    assert ens.weights.sum() == pytest.approx(1.0) and len(ens) == 3
    # a member without a validation loss: nothing to compare them on, equal weights
    np.testing.assert_allclose(ensemble_weights([1.0, None]), [0.5, 0.5])
    with pytest.raises(EstimatorError, match="2 members got 1 scores"):
        EnsemblePosterior(members[:2], [0.0])


def test_log_prob_is_the_weighted_log_sum_exp(members) -> None:
    ens = EnsemblePosterior(members)
    theta = np.random.default_rng(0).multivariate_normal(LG.mean(X_O), 4 * LG.cov, size=50)
    conds = {"x": X_O[None]}
    each = np.stack([m.log_prob(theta, conds) for m in members])
    expected = np.log((ens.weights[:, None] * np.exp(each)).sum(0))
    np.testing.assert_allclose(ens.log_prob(theta, conds), expected, rtol=1e-10)


def test_samples_match_the_analytic_posterior(members) -> None:
    ens = EnsemblePosterior(members)
    rec = ens.sample_posterior(6000, {"x": X_O[None]}, np.random.default_rng(5))
    values = rec["value"]
    assert values.shape == (6000, 2) and values.dtype == np.float64
    mean, cov = LG.mean(X_O), LG.cov
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(values.mean(0) - mean) < 0.2 * sd), (values.mean(0) - mean) / sd
    assert np.all(np.abs(values.std(0) / sd - 1.0) < 0.15), values.std(0) / sd
    # the draws' log_prob is the mixture's density there, close to the analytic one
    np.testing.assert_allclose(rec["log_prob"], ens.log_prob(values, {"x": X_O[None]}))
    assert np.median(np.abs(rec["log_prob"] - mvn_logpdf(values, mean, cov))) < 0.3
    # per-row conditions: each row drawn at its own x
    xs = np.stack([X_O, -X_O])[np.arange(400) % 2]
    rows = ens.sample_posterior(400, {"x": xs}, np.random.default_rng(6))["value"]
    assert rows[::2, 0].mean() - rows[1::2, 0].mean() == pytest.approx(
        2 * LG.mean(X_O)[0], abs=0.3 * sd[0] + 0.05
    )


class Point:
    """A member whose every draw is ``at`` (density 0 or 1 in log space, for counting)."""

    def __init__(self, at: float, loss: float):
        self.at, self.loss = at, loss

    def status(self) -> dict:
        return {"best_val_loss": self.loss}

    def sample_posterior(self, n, conditions, rng=None):
        return {"value": np.full((n, 1), self.at), "log_prob": np.zeros(n)}

    def sample_proposal(self, n, conditions, rng=None, round=None):
        return {"value": np.full((n, 1), self.at), "log_prob": np.full(n, self.at)}

    def log_prob(self, theta, conditions):
        return np.where(np.asarray(theta)[:, 0] == self.at, 0.0, -np.inf)


def test_rows_follow_the_weights_and_proposals_mix_equally() -> None:
    ens = EnsemblePosterior([Point(0.0, 0.0), Point(1.0, -np.log(3.0))])  # scores 0, log 3
    np.testing.assert_allclose(ens.weights, [0.25, 0.75])
    values = ens.sample_posterior(8000, {}, np.random.default_rng(0))["value"]
    assert values.mean() == pytest.approx(0.75, abs=0.03)
    again = ens.sample_posterior(8000, {}, np.random.default_rng(0))["value"]
    np.testing.assert_array_equal(values, again)  # a seed fixes the draws
    np.testing.assert_allclose(ens.log_prob(np.array([[0.0], [1.0], [2.0]]), {}),
                               [np.log(0.25), np.log(0.75), -np.inf])  # fmt: skip
    rec = ens.sample_proposal(8000, {}, np.random.default_rng(0), round=2)
    assert rec["value"].mean() == pytest.approx(0.5, abs=0.03)
    np.testing.assert_array_equal(rec["log_prob"], rec["value"][:, 0])  # the drawer's density


def test_an_ensemble_checkpoint_loads_as_the_mixture(members) -> None:
    data = pack_members([m.save_bytes() for m in members])
    assert unpack_members(members[0].save_bytes()) is None
    est = GaussianPosterior(max_epochs=30, ensemble=3)
    est.setup(LG.context())
    est.load_bytes(data, source="test")
    ens = EnsemblePosterior(members)
    np.testing.assert_allclose(est.status()["ensemble"]["weights"], ens.weights)
    theta = LG.prior.sample(20, np.random.default_rng(1))
    np.testing.assert_allclose(
        est.log_prob(theta, {"x": X_O[None]}), ens.log_prob(theta, {"x": X_O[None]})
    )
    a = est.sample_posterior(100, {"x": X_O[None]}, np.random.default_rng(3))
    b = ens.sample_posterior(100, {"x": X_O[None]}, np.random.default_rng(3))
    np.testing.assert_array_equal(a["value"], b["value"])
    # saved back whole; one member's checkpoint makes it one estimator again
    assert unpack_members(est.save_bytes()) == [m.save_bytes() for m in members]
    est.load_bytes(members[1].save_bytes())
    assert "ensemble" not in est.status()
    with pytest.raises(CheckpointError, match="cannot read the ensemble in broken"):
        est.load_bytes(data[:40], source="broken")
