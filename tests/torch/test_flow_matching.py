"""FlowMatchingPosterior (FMPE) on a Gaussian task with an analytic posterior: accuracy, densities
through the probability-flow ODE, support, seeds, shapes, checkpoints and refused options."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from kestrel_core import ConfigError, EstimatorContext, InMemoryStore, Product
from kestrel_torch import FlowMatchingPosterior

from .estimator_helpers import one_thread  # noqa: F401 (fixture)

PRIOR = Product([["normal", 0.0, 1.0]] * 2)
SIGMA = 0.5  # x = θ + N(0, σ² I), θ ~ N(0, I): posterior N(x / (1 + σ²), σ² / (1 + σ²) I)
POST_SD = SIGMA / np.sqrt(1.0 + SIGMA**2)
X_O = np.array([0.8, -0.5])
CONFIG = {"max_epochs": 40, "early_stop_patience": 40, "lr": 2e-3}

pytestmark = pytest.mark.usefixtures("one_thread")


def post_mean(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + SIGMA**2)


def log_post(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    r = (theta - post_mean(x)) / POST_SD
    return -0.5 * (r * r).sum(-1) - theta.shape[-1] * np.log(POST_SD * np.sqrt(2.0 * np.pi))


def train(
    prior: Product, n: int, seed: int = 0, validation: int = 256, **options: object
) -> FlowMatchingPosterior:
    rng = np.random.default_rng(0)
    theta = prior.sample(n, rng)
    x = theta + SIGMA * rng.normal(size=theta.shape)
    store = InMemoryStore(min_samples=0, max_samples=n, validation_samples=validation)
    store.append({"theta.value": theta, "theta.log_prob": prior.log_prob(theta), "x.value": x}, n)
    est = FlowMatchingPosterior(seed=seed, **{**CONFIG, **options})
    est.setup(EstimatorContext(node="theta", prior=prior, evidence=("x",), seed=7))
    asyncio.run(est.train(store.view()))
    return est


@pytest.fixture(scope="module")
def trained(one_thread: None) -> FlowMatchingPosterior:  # noqa: F811 (fixture argument)
    return train(PRIOR, 4096)


def test_recovers_the_analytic_posterior(trained: FlowMatchingPosterior) -> None:
    rec = trained.sample_posterior(2000, {"x": X_O[None]})
    values = rec["value"]
    assert values.shape == (2000, 2) and values.dtype == np.float64
    assert rec["log_prob"].shape == (2000,) and np.all(np.isfinite(rec["log_prob"]))
    err = (values.mean(0) - post_mean(X_O)) / POST_SD
    ratio = values.std(0) / POST_SD
    assert np.all(np.abs(err) < 0.35), err
    assert np.all(np.abs(ratio - 1.0) < 0.25), ratio
    # log_prob through the probability-flow ODE: the reported density of the draws, and close
    # to the analytic posterior's
    log_prob = trained.log_prob(values[:300], {"x": X_O[None]})
    assert log_prob.shape == (300,) and log_prob.dtype == np.float64
    assert np.median(np.abs(log_prob - rec["log_prob"][:300])) < 0.01
    assert np.median(np.abs(log_prob - log_post(values[:300], X_O))) < 0.3


def test_batches_of_observations(trained: FlowMatchingPosterior) -> None:
    xs = np.array([[0.8, -0.5], [-1.0, 0.4], [0.0, 1.2]])
    rec = trained.sample_posterior(3, {"x": xs})
    assert rec["value"].shape == (3, 2) and rec["log_prob"].shape == (3,)
    many = np.repeat(xs, 600, axis=0)
    values = trained.sample_posterior(len(many), {"x": many})["value"].reshape(3, 600, 2)
    err = (values.mean(1) - post_mean(xs)) / POST_SD
    assert np.all(np.abs(err) < 0.4), err
    assert trained.log_prob(rec["value"], {"x": xs}).shape == (3,)


def test_log_prob_is_minus_inf_outside_the_support(one_thread: None) -> None:  # noqa: F811
    bounded = Product([["uniform", -3.0, 3.0]] * 2)
    est = train(bounded, 256, max_epochs=1, validation=0, ode_steps=4)
    theta = np.array([[0.1, 0.2], [3.5, 0.0], [np.nan, 0.0], [0.0, -np.inf], [-1.0, 1.0]])
    out = est.log_prob(theta, {"x": np.zeros((1, 2))})
    assert np.all(np.isfinite(out[[0, 4]]))
    assert np.all(out[1:4] == -np.inf)
    draws = est.sample_posterior(500, {"x": np.zeros((1, 2))})["value"]
    assert np.all(np.abs(draws) <= 3.0)


def test_same_seed_same_weights(one_thread: None) -> None:  # noqa: F811
    a, b = (train(PRIOR, 512, seed=3, max_epochs=2, ode_steps=4) for _ in range(2))
    sa, sb = a._fit.model.state_dict(), b._fit.model.state_dict()  # type: ignore[union-attr]
    assert sa.keys() == sb.keys()
    assert [k for k in sa if not torch.equal(sa[k], sb[k])] == []
    c = train(PRIOR, 512, seed=4, max_epochs=2, ode_steps=4)
    sc = c._fit.model.state_dict()  # type: ignore[union-attr]
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_checkpoint_round_trip(trained: FlowMatchingPosterior, tmp_path: Path) -> None:
    trained.save(str(tmp_path))
    loaded = FlowMatchingPosterior(**CONFIG)
    loaded.setup(EstimatorContext(node="theta", prior=PRIOR, evidence=("x",), seed=7))
    loaded.load(str(tmp_path))
    theta = np.array([[0.5, -0.3], [0.0, 0.0]])
    given = {"x": X_O[None]}
    np.testing.assert_array_equal(loaded.log_prob(theta, given), trained.log_prob(theta, given))
    assert loaded.total_epochs == trained.total_epochs


def test_hutchinson_above_ten_dimensions(one_thread: None) -> None:  # noqa: F811
    prior = Product([["normal", 0.0, 1.0]] * 12)
    est = train(prior, 256, max_epochs=1, validation=0, ode_steps=4, hidden_features=(16,))
    rec = est.sample_posterior(50, {"x": np.zeros((1, 12))})
    assert rec["value"].shape == (50, 12) and np.all(np.isfinite(rec["log_prob"]))
    first = est.log_prob(rec["value"], {"x": np.zeros((1, 12))})
    again = est.log_prob(rec["value"], {"x": np.zeros((1, 12))})
    assert np.all(np.isfinite(first))
    np.testing.assert_array_equal(first, again)  # deterministic probes


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"gamma": 0.5}, "gamma=0.5"),
        ({"discard_samples": True}, "discard_samples=True"),
        ({"ode_method": "rk45"}, "ode_method='rk45'"),
        ({"sigma_min": 1.0}, "sigma_min=1.0"),
        ({"time_prior_exponent": -1}, "time_prior_exponent=-1"),
    ],
)
def test_refused_options(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        FlowMatchingPosterior(**kwargs)


def test_adaptive_solver_draws(trained: FlowMatchingPosterior) -> None:
    head = trained._fit.best.head  # type: ignore[union-attr]
    method = head.ode_method
    head.ode_method = "dopri5"
    try:
        values = trained.sample_posterior(500, {"x": X_O[None]})["value"]
    finally:
        head.ode_method = method
    assert np.all(np.abs((values.mean(0) - post_mean(X_O)) / POST_SD) < 0.4)
