"""FlowPosterior on a bounded 2-D problem with a known posterior: accuracy, support, correction."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from kestrel_core import EstimatorContext, InMemoryStore, Product
from kestrel_torch import FlowPosterior

from .estimator_helpers import one_thread  # noqa: F401 (fixture)

PRIOR = Product([["uniform", -1.0, 1.0]] * 2)
SIGMA = 0.1  # x = θ + N(0, σ² I): away from the bounds the posterior is N(x_o, σ² I)
X_O = np.array([0.3, -0.2])
CONFIG = {"max_epochs": 40, "transforms": 2, "hidden_features": (32, 32), "lr": 3e-3, "num_proposals": 64}

pytestmark = pytest.mark.usefixtures("one_thread")


def block(theta: np.ndarray, log_prob: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"theta.value": theta, "theta.log_prob": log_prob, "x.value": theta + SIGMA * rng.normal(size=theta.shape)}


def train(blocks: list[dict[str, np.ndarray]], seed: int = 0) -> FlowPosterior:
    n = sum(len(b["theta.value"]) for b in blocks)
    store = InMemoryStore(min_samples=0, max_samples=n, validation_samples=256)
    for b in blocks:
        store.append(b, len(b["theta.value"]))
    est = FlowPosterior(seed=seed, **CONFIG)
    est.setup(EstimatorContext(node="theta", prior=PRIOR, evidence=("x",)))
    asyncio.run(est.train(store.view()))
    return est


@pytest.fixture(scope="module")
def trained(one_thread: None) -> FlowPosterior:  # noqa: F811 (fixture argument)
    rng = np.random.default_rng(0)
    theta = PRIOR.sample(4096, rng)
    return train([block(theta, PRIOR.log_prob(theta), rng)])


def inside(values: np.ndarray) -> bool:
    return bool(np.all((values >= -1.0) & (values <= 1.0)))


def test_recovers_the_posterior(trained: FlowPosterior) -> None:
    rec = trained.sample_posterior(3000, {"x": X_O[None]})
    values = rec["value"]
    assert values.shape == (3000, 2) and values.dtype == np.float64 and inside(values)
    assert np.all(np.abs(values.mean(0) - X_O) < 0.3 * SIGMA), (values.mean(0) - X_O) / SIGMA
    assert np.all(np.abs(values.std(0) / SIGMA - 1.0) < 0.2), values.std(0) / SIGMA
    assert abs(np.corrcoef(values.T)[0, 1]) < 0.1
    # the reported density is the one log_prob() evaluates (both estimate the same normaliser)
    log_prob = trained.log_prob(values[:256], {"x": X_O[None]})
    assert np.median(np.abs(log_prob - rec["log_prob"][:256])) < 0.05


def test_samples_never_leave_the_support(trained: FlowPosterior) -> None:
    x_edge = np.array([0.97, -0.98])  # truncated: the likelihood reaches past the bounds
    posterior = trained.sample_posterior(2000, {"x": x_edge[None]})["value"]
    proposal = trained.sample_proposal(2000, {"x": x_edge[None]})["value"]
    assert inside(posterior) and inside(proposal)
    # mean of N(0.97, 0.1²) truncated at 1: 0.97 − σ φ(0.3) / Φ(0.3) ≈ 0.908
    assert abs(posterior[:, 0].mean() - 0.908) < 0.3 * SIGMA


def test_proposal_lies_between_posterior_and_prior(trained: FlowPosterior) -> None:
    rec = trained.sample_proposal(3000, {"x": X_O[None]})
    values = rec["value"]
    assert inside(values) and np.isfinite(rec["log_prob"]).all()
    nominal = SIGMA / np.sqrt(trained.config["gamma"])  # σ of prior · likelihood^γ
    assert np.all(np.abs(values.mean(0) - X_O) < 0.5 * nominal)
    assert np.all(values.std(0) > 1.1 * SIGMA) and np.all(values.std(0) < 2.5 * nominal)
    assert np.all(values.std(0) < 0.5 * PRIOR.sample(10000, np.random.default_rng(1)).std(0))


def test_correction_with_a_buffer_half_from_a_narrow_proposal() -> None:
    # Half the buffer comes from N(x_o, σ²) — the posterior itself. Uncorrected, the fit at x_o
    # would have σ ≈ 0.71 of the truth.
    rng = np.random.default_rng(1)
    theta = PRIOR.sample(2048, rng)
    narrow = X_O + SIGMA * rng.normal(size=(2048, 2))
    log_q = -0.5 * (((narrow - X_O) / SIGMA) ** 2).sum(1) - 2 * np.log(SIGMA) - np.log(2 * np.pi)
    est = train([block(theta, PRIOR.log_prob(theta), rng), block(narrow, log_q, rng)], seed=1)
    values = est.sample_posterior(3000, {"x": X_O[None]})["value"]
    assert np.all(np.abs(values.mean(0) - X_O) < 0.3 * SIGMA), (values.mean(0) - X_O) / SIGMA
    assert np.all(np.abs(values.std(0) / SIGMA - 1.0) < 0.2), values.std(0) / SIGMA
