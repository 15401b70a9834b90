"""FlowLikelihood (neural likelihood estimation) and its population MCMC: exact targets first,
then the estimator on a linear-Gaussian problem with a known posterior."""

from __future__ import annotations

import asyncio
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from kestrel_core import EstimatorContext, InMemoryStore, Product
from kestrel_core.graph._observe import ObservationWarning
from kestrel_torch import FlowLikelihood
from kestrel_torch._errors import ConfigError, EstimatorError
from kestrel_torch.estimators._mcmc import MCMCPosterior, sample_groups

from .estimator_helpers import (  # noqa: F401 (fixture)
    LinearGaussian,
    filled_store,
    mvn_logpdf,
    one_thread,
)

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = {
    "max_epochs": 40,
    "early_stop_patience": 40,
    "transforms": 2,
    "hidden_features": (32, 32),
    "lr": 3e-3,
}


# -- the sampler on exact densities ---------------------------------------------------------------
def gaussian_likelihood(centre: torch.Tensor, width: torch.Tensor):
    """log L_g(z) = −½ |(z − c_g) / w_g|²: with the prior N(0, I) the posterior is
    N(c_g / (w_g² + 1), w_g² / (w_g² + 1))."""

    def log_l(z: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
        return -0.5 * (((z - centre[group]) / width[group, None]) ** 2).sum(1)

    mean = centre / (width**2 + 1)[:, None]
    sd = width / torch.sqrt(width**2 + 1)
    return log_l, mean, sd


def test_mcmc_groups_reach_their_own_posteriors() -> None:
    g = torch.Generator().manual_seed(0)
    centre = torch.tensor([[0.97, -0.49], [2.0, 1.0], [-1.0, 0.5]], dtype=torch.float64)
    width = torch.tensor([0.3, 0.05, 1e-4], dtype=torch.float64)
    log_l, mean, sd = gaussian_likelihood(centre, width)
    z, log_p = sample_groups(log_l, torch.tensor([3000, 3, 2000]), 2, 1.0, 50, g)
    assert z.shape == (5003, 2) and log_p.shape == (5003,) and z.dtype == torch.float64
    group = torch.tensor([0] * 3000 + [1] * 3 + [2] * 2000)
    np.testing.assert_allclose(
        log_p, -0.5 * (z * z).sum(1) - math.log(2 * math.pi) + log_l(z, group)
    )
    first, small, narrow = z[:3000], z[3000:3003], z[3003:]
    # 3000 draws: several states of each of 1024 chains
    assert torch.all((first.mean(0) - mean[0]).abs() < 0.1 * sd[0])
    assert torch.all((first.std(0) / sd[0] - 1).abs() < 0.1)
    assert torch.all((small - mean[1]).abs() < 5 * sd[1])  # a group of 3 runs 64 chains
    # 1e-4 of the prior's scale: tempering finds it from prior draws
    assert torch.all((narrow.mean(0) - mean[2]).abs() < 0.1 * sd[2])
    assert torch.all((narrow.std(0) / sd[2] - 1).abs() < 0.1)


def test_mcmc_tempers_towards_gamma() -> None:
    g = torch.Generator().manual_seed(2)
    centre = torch.tensor([[0.5, -0.5]], dtype=torch.float64)
    width = torch.tensor([0.1], dtype=torch.float64)
    log_l, _, _ = gaussian_likelihood(centre, width)
    z, _ = sample_groups(log_l, torch.tensor([2000]), 2, 0.25, 20, g)
    # L^¼ is N(c, (2w)²) up to a constant: posterior width 2w / √(4w² + 1)
    sd = 0.2 / math.sqrt(1.04)
    assert torch.all((z.std(0) / sd - 1).abs() < 0.1)


def test_mcmc_weighs_separate_modes_by_their_mass() -> None:
    g = torch.Generator().manual_seed(1)
    centre = torch.tensor([1.5, 0.0], dtype=torch.float64)

    def log_l(z: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
        right = -0.5 * (((z - centre) / 0.1) ** 2).sum(1)
        left = -0.5 * (((z + centre) / 0.1) ** 2).sum(1) + math.log(3.0)
        return torch.logaddexp(right, left)

    z, _ = sample_groups(log_l, torch.tensor([4000]), 2, 1.0, 50, g)
    right = z[:, 0] > 0
    assert abs(float(right.double().mean()) - 0.25) < 0.04
    assert torch.all((z[right].std(0) / 0.0995 - 1).abs() < 0.15)


def test_mcmc_posterior_of_a_potential_draws_each_row_for_its_own_observation() -> None:
    # the potential of the linear-Gaussian likelihood s ~ N(z, w² I): posterior of observation
    # s is N(s / (w² + 1), w² / (w² + 1)); rows of s alternate between two observations
    w = 0.2

    def potential(s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return -0.5 * (((s.to(torch.float64) - z) / w) ** 2).sum(1)

    posterior = MCMCPosterior(potential, 2, steps=30, proposal_steps=5)
    obs = torch.tensor([[1.0, -0.5], [-2.0, 0.5]], dtype=torch.float64)
    s = obs[torch.arange(2000) % 2]
    z, log_p = posterior.sample(s, 2000, 1.0, torch.Generator().manual_seed(3))
    assert z.shape == (2000, 2) and log_p.shape == (2000,) and z.dtype == torch.float64
    np.testing.assert_allclose(log_p, posterior.log_prob(z, s))
    sd = w / math.sqrt(w**2 + 1)
    for k in range(2):
        mine = z[k::2]
        assert torch.all((mine.mean(0) - obs[k] / (w**2 + 1)).abs() < 0.1 * sd)
        assert torch.all((mine.std(0) / sd - 1).abs() < 0.1)


# -- the estimator --------------------------------------------------------------------------------
def train(store: InMemoryStore, problem: LinearGaussian, **options: object) -> FlowLikelihood:
    est = FlowLikelihood(seed=0, **{**CONFIG, **options})
    est.setup(problem.context())
    asyncio.run(est.train(store.view()))
    return est


@pytest.fixture(scope="module")
def problem() -> LinearGaussian:
    return LinearGaussian.make(d=2, k=3, seed=0, sigma=0.1)


@pytest.fixture(scope="module")
def trained(problem: LinearGaussian, one_thread: None) -> FlowLikelihood:  # noqa: F811
    rng = np.random.default_rng(0)
    return train(filled_store([problem.prior_block(4096, rng)]), problem)


def x_o(problem: LinearGaussian) -> np.ndarray:
    return problem.simulate(np.array([[0.6, -0.4]]), np.random.default_rng(5))[0]


def test_recovers_the_posterior(trained: FlowLikelihood, problem: LinearGaussian) -> None:
    x = x_o(problem)
    # a draw of its own (the module's estimator's sampling stream advances with whichever
    # tests ran before, in a random order)
    rec = trained.sample_posterior(4000, {"x": x[None]}, rng=np.random.default_rng(21))
    values = rec["value"]
    assert values.shape == (4000, 2) and values.dtype == np.float64
    sd = np.sqrt(np.diag(problem.cov))
    err = (values.mean(0) - problem.mean(x)) / sd
    assert np.all(np.abs(err) < 0.3), err
    assert np.all(np.abs(values.std(0) / sd - 1) < 0.15), values.std(0) / sd
    # log_prob is prior × likelihood up to a constant of the observation: the draws' densities
    # and log_prob agree, and differ from the exact posterior's by one constant
    log_prob = trained.log_prob(values[:500], {"x": x[None]})
    np.testing.assert_allclose(log_prob, rec["log_prob"][:500], atol=1e-9)
    diff = log_prob - mvn_logpdf(values[:500], problem.mean(x), problem.cov)
    assert np.std(diff) < 0.3


def test_proposal_is_the_tempered_posterior(
    trained: FlowLikelihood, problem: LinearGaussian
) -> None:
    x = x_o(problem)
    gamma = trained.config["gamma"]
    mean, cov = problem.tempered(x, gamma)
    values = trained.sample_proposal(4000, {"x": x[None]}, rng=np.random.default_rng(22))["value"]
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(values.mean(0) - mean) < 0.3 * sd)
    assert np.all(np.abs(values.std(0) / sd - 1) < 0.15), values.std(0) / sd


def test_several_observations_in_one_call(trained: FlowLikelihood, problem: LinearGaussian) -> None:
    rng = np.random.default_rng(3)
    xs = problem.simulate(0.5 * rng.normal(size=(3, 2)), rng)  # where training rows are dense
    rows = np.repeat(xs, [1000, 5, 1000], axis=0)[::-1].copy()  # groups in any order
    values = trained.sample_posterior(len(rows), {"x": rows}, rng=np.random.default_rng(23))[
        "value"
    ]
    sd = np.sqrt(np.diag(problem.cov))
    for x in xs[[0, 2]]:  # as one call for that observation alone
        mine = values[(rows == x).all(1)]
        alone = trained.sample_posterior(4000, {"x": x[None]}, rng=np.random.default_rng(24))[
            "value"
        ]
        assert np.all(np.abs(mine.mean(0) - alone.mean(0)) < 0.15 * sd)
        assert np.all(np.abs(mine.std(0) / alone.std(0) - 1) < 0.15)
    five = values[(rows == xs[1]).all(1)]
    assert five.shape == (5, 2) and np.all(np.abs(five - problem.mean(xs[1])) < 5 * sd)


def test_save_and_load_keep_the_density(
    trained: FlowLikelihood, problem: LinearGaussian, tmp_path: object
) -> None:
    x = x_o(problem)
    theta = np.random.default_rng(2).normal(size=(32, 2)) * 0.1 + problem.mean(x)
    blob = trained.save_bytes()
    fresh = FlowLikelihood(seed=0, **CONFIG)
    fresh.setup(problem.context())
    fresh.load_bytes(blob)
    np.testing.assert_allclose(
        fresh.log_prob(theta, {"x": x[None]}), trained.log_prob(theta, {"x": x[None]}), rtol=1e-9
    )


def test_sequential_rows_need_no_correction(problem: LinearGaussian) -> None:
    # most rows from a narrow proposal around the posterior: the likelihood is the same
    rng = np.random.default_rng(4)
    x = x_o(problem)
    mean, cov = problem.mean(x), problem.cov
    blocks = [problem.prior_block(1024, rng), problem.gaussian_block(3072, mean, 4 * cov, rng)]
    est = train(filled_store(blocks), problem, max_epochs=25)
    values = est.sample_posterior(4000, {"x": x[None]})["value"]
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(values.mean(0) - mean) < 0.3 * sd)
    assert np.all(np.abs(values.std(0) / sd - 1) < 0.15), values.std(0) / sd


# -- bad input --------------------------------------------------------------------------------------
def test_discard_samples_is_refused() -> None:
    with pytest.raises(ConfigError, match="discard_samples"):
        FlowLikelihood(discard_samples=True)
    with pytest.raises(TypeError, match="mcmc_steps"):
        FlowLikelihood(mcmc_step=10)


class Trainable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_a_trainable_embedding_is_refused(problem: LinearGaussian) -> None:
    rng = np.random.default_rng(6)
    store = filled_store([problem.prior_block(512, rng)])
    with pytest.raises(EstimatorError, match="embedding"):
        train(store, problem, max_epochs=1, embedding={"_target_": f"{__name__}.Trainable"})


def test_k23_a_constant_feature_carries_nothing() -> None:
    prior = Product([["uniform", -1.0, 1.0]] * 2)
    rng = np.random.default_rng(7)
    theta = prior.sample(3000, rng)
    x = np.concatenate([theta + 0.05 * rng.normal(size=theta.shape), np.zeros((3000, 1))], 1)
    store = InMemoryStore(min_samples=0, max_samples=3000, validation_samples=256)
    store.append(
        {"theta.value": theta, "theta.log_prob": prior.log_prob(theta), "x.value": x}, 3000
    )
    est = FlowLikelihood(seed=0, **{**CONFIG, "max_epochs": 25})
    est.setup(EstimatorContext(node="theta", prior=prior, evidence=("x",)))
    asyncio.run(est.train(store.view()))
    assert np.isfinite(est.status()["best_val_loss"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        at_half = est.sample_posterior(2000, {"x": np.array([[0.3, -0.2, 0.5]])})["value"]
    at_zero = est.sample_posterior(2000, {"x": np.array([[0.3, -0.2, 0.0]])})["value"]
    assert any(
        issubclass(w.category, ObservationWarning) and "2" in str(w.message) for w in caught
    ), [str(w.message) for w in caught]
    for values in (at_half, at_zero):
        assert np.all(values.std(0) > 0.02) and np.all(values.std(0) < 0.1)
    assert np.all(np.abs(at_half.mean(0) - at_zero.mean(0)) < 0.02)
