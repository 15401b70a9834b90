"""Guards for observations outside the training data (issue 10 items 5–6): K23, K24, far-from-training
warnings, the ``amortized`` option — at the estimator level, on an in-memory store."""

from __future__ import annotations

import asyncio
import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from kestrel_core import ConfigError, EstimatorContext, EstimatorError, InMemoryStore, Product
from kestrel_core.graph._observe import ObservationWarning
from kestrel_torch import FlowPosterior, GaussianPosterior, RunningNorm
from kestrel_torch.checkpoint._state import load_module_state, module_state
from kestrel_torch.estimators._guards import FAR_Z
from kestrel_torch.nets._moments import RunningMoments

from .estimator_helpers import one_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

PRIOR = Product([["uniform", -1.0, 1.0]] * 2)
NOISE = 0.01
X_OFF = np.array([[0.3, -0.2, 0.5]])  # the third feature was always exactly 0 in training
X_ON = np.array([[0.3, -0.2, 0.0]])


def k23_store(n: int = 2048, seed: int = 0) -> InMemoryStore:
    """Case K23: x = [θ1 + 0.01 ε, θ2 + 0.01 ε, 0.0] for θ ~ U(−1, 1)²."""
    rng = np.random.default_rng(seed)
    theta = PRIOR.sample(n, rng)
    x = np.concatenate([theta + NOISE * rng.normal(size=theta.shape), np.zeros((n, 1))], axis=1)
    store = InMemoryStore(min_samples=0, max_samples=n, validation_samples=256)
    block = {"theta.value": theta, "theta.log_prob": PRIOR.log_prob(theta), "x.value": x}
    store.append(block, n)
    return store


def trained(cls, store: InMemoryStore, **options):
    est = cls(seed=0, **options)
    est.setup(EstimatorContext(node="theta", prior=PRIOR, evidence=("x",), seed=1))
    asyncio.run(est.train(store.view()))
    return est


@pytest.fixture(scope="module")
def store() -> InMemoryStore:
    return k23_store()


@pytest.fixture(scope="module")
def gaussian(store, one_thread):  # noqa: F811 (fixture argument)
    return trained(GaussianPosterior, store, max_epochs=5)


@pytest.fixture(scope="module")
def flow(store, one_thread):  # noqa: F811 (fixture argument)
    return trained(FlowPosterior, store, max_epochs=5, transforms=1, hidden_features=(32, 32))


def fresh(est):
    """A copy of a fixture's estimator that has warned about nothing yet (an estimator warns
    once per message, and the tests run in random order)."""
    est = copy.deepcopy(est)
    est._conditions._warned.clear()
    return est


def draws(est, x, n=2000):
    return est.sample_posterior(n, {"x": x}, rng=np.random.default_rng(3))["value"]


# -- K23 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gaussian", "flow"])
def test_k23_constant_feature_is_dropped_and_named(name, request):
    est = fresh(request.getfixturevalue(name))
    with pytest.warns(ObservationWarning, match="constant in the training data") as off:
        at_off = draws(est, X_OFF)
    message = str(off[0].message)
    assert "node 'theta'" in message and "x[2]" in message
    assert "while the observation differs from it" in message and "0.5 observed" in message
    (finding,) = off[0].message.findings
    assert finding["kind"] == "constant" and finding["feature"] == 2 and finding["differs"]
    assert finding["node"] == "theta" and finding["value"] == 0.5 and finding["mean"] == 0.0
    with pytest.warns(ObservationWarning, match=r"x\[2\] \(always 0\)"):
        at_on = draws(est, X_ON)
    for values in (at_off, at_on):
        spread = values.std(0)
        assert np.all(np.isfinite(values)) and np.all(spread > NOISE / 3), spread
        assert np.all(spread < 0.5), spread  # informed by the first two features
        assert np.all(np.abs(values.mean(0)) < 0.9)  # not stuck on a prior corner (±1)
    # the constant feature carries no information: the same posterior at both observations
    np.testing.assert_allclose(at_off, at_on, rtol=0, atol=1e-12)


def test_k23_gaussian_posterior_is_near_the_truth(gaussian):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ObservationWarning)  # warned once, above
        values = draws(gaussian, X_OFF)
    assert np.all(np.abs(values.mean(0) - X_OFF[0, :2]) < 0.1), values.mean(0)


def test_k23_running_moments_leave_constant_features_out():
    stats = RunningMoments(3, 0.5)
    rows = torch.tensor([[1.0, 0.1, 2.75e-3], [2.0, 0.1, 2.75e-3 + 1e-9]], dtype=torch.float64)
    stats.update(rows)
    stats.update(rows.flip(0))
    assert stats.constant.tolist() == [False, True, False]  # a spread of 1e-9 is information
    out = stats.normalize(torch.tensor([[1.5, 7.0, 2.75e-3]], dtype=torch.float64))
    assert out[0, 1] == 0.0 and torch.isfinite(out).all()
    assert stats.lo.tolist() == [1.0, 0.1, 2.75e-3] and stats.hi[0] == 2.0


def test_k23_running_norm_leaves_constant_features_out():
    norm = RunningNorm(momentum=0.5)
    x = torch.stack([torch.linspace(-1, 1, 8), torch.zeros(8)], dim=1)
    norm(x)
    norm.eval()
    y = norm(torch.tensor([[0.5, 0.5]]))
    assert norm.constant.tolist() == [False, True] and y[0, 1] == 0.0
    assert norm.inverse(y)[0, 1] == 0.0  # the constant itself


def test_k23_constant_input_of_a_running_norm_inside_the_embedding_is_named(store):
    net = nn.Sequential(RunningNorm(momentum=0.1), nn.Linear(3, 4).double())
    est = trained(GaussianPosterior, store, max_epochs=1, embedding=net)
    with pytest.warns(ObservationWarning, match=r"embedding\.net\.0 input 2 \(always 0 in"):
        values = draws(est, X_OFF, n=200)
    assert np.all(np.isfinite(values)) and np.all(values.std(0) > 0)


def test_moments_from_a_checkpoint_without_the_range_load_with_an_unknown_range():
    stats = RunningMoments(2, 0.5)
    stats.update(torch.randn(16, 2, dtype=torch.float64))
    state = module_state(stats)
    for key in ("lo", "hi"):
        del state["state_dict"][key]  # written before the range was kept
    fresh = RunningMoments(2, 0.5)
    load_module_state(fresh, state)
    assert torch.equal(fresh.mean, stats.mean) and not bool((fresh.lo <= fresh.hi).any())


# -- far from the training data -------------------------------------------------------------------


def test_far_observation_warns_with_feature_and_z_score(gaussian):
    x = np.array([[0.3, 4.0, 0.0]])  # x[1] far beyond every training row (|x| ≤ ~1.03)
    gaussian = fresh(gaussian)
    with pytest.warns(ObservationWarning) as caught:
        draws(gaussian, x, n=10)
    far = [w.message for w in caught if "far outside" in str(w.message)]
    assert len(far) == 1
    assert "x[1] = 4 (z = +" in str(far[0]) and "training range [" in str(far[0])
    (finding,) = far[0].findings
    assert finding["kind"] == "far" and finding["feature"] == 1 and finding["z"] > FAR_Z
    assert finding["value"] == 4.0 and finding["hi"] < 1.1
    assert any(f["kind"] == "far" for f in gaussian._conditions.findings)  # for the status


def test_inside_the_training_data_nothing_is_far(gaussian):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draws(gaussian, np.array([[0.95, -0.97, 0.0]]), n=10)  # near the edge, still inside
    assert not [w for w in caught if "far outside" in str(w.message)]


def test_k23_draws_on_the_prior_bounds_are_named(gaussian):
    # an observation ~10⁵ training σ out: the Gaussian's mean lands far outside the prior,
    # and every draw sits on a bound of the uniform prior; the draws say so, not only x
    x = np.array([[0.3, 2000.0, 0.0]])
    gaussian = fresh(gaussian)
    with pytest.warns(ObservationWarning) as caught:
        theta = draws(gaussian, x, n=200)
    assert np.isclose(np.abs(theta[:, 1]), 1.0).all()  # on a bound of U(−1, 1)
    edge = [w.message for w in caught if "edge of the prior's support" in str(w.message)]
    assert len(edge) == 1 and "more than 1 % of them beyond 8 prior σ for" in str(edge[0])
    assert "parameter 1" in str(edge[0])
    with warnings.catch_warnings(record=True) as again:  # other draws, the same message: once
        warnings.simplefilter("always")
        draws(gaussian, x, n=300)
    assert not [w for w in again if "edge of the prior" in str(w.message)]
    finding = next(f for f in edge[0].findings if f["feature"] == 1)
    assert finding["kind"] == "edge" and finding["value"] == 1.0 and finding["z"] > 8
    assert any(f["kind"] == "edge" for f in gaussian._conditions.findings)  # for the status


def test_a_posterior_inside_the_prior_has_no_edge_finding(gaussian, flow):
    for est in (gaussian, flow):
        est = fresh(est)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            draws(est, X_ON)
        assert not [w for w in caught if "edge of the prior" in str(w.message)]
        assert not [f for f in est._conditions.findings if f["kind"] == "edge"]


# -- K24 at the estimator -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_k24_non_finite_condition_is_refused_naming_node_index_value(gaussian, bad):
    x = np.array([[0.4, bad, 0.0]])
    with pytest.raises(
        EstimatorError, match=rf"node 'theta': condition 'x' holds {bad} at index 1"
    ):
        gaussian.sample_posterior(4, {"x": x})
    rows = np.zeros((4, 3))
    rows[2, 0] = bad
    with pytest.raises(EstimatorError, match=r"condition 'x' \(shape \(4, 3\)\) .* index \(2, 0\)"):
        gaussian.sample_posterior(4, {"x": rows})


# -- amortized ------------------------------------------------------------------------------------


def test_amortized_turns_proposals_off():
    est = GaussianPosterior(amortized=True)
    assert est.options.gamma == 0.0 and est.config["amortized"] is True
    assert GaussianPosterior(amortized=True, gamma=0).options.gamma == 0.0
    with pytest.raises(ConfigError, match=r"amortized=True, gamma=0.5.*draws no proposals"):
        FlowPosterior(amortized=True, gamma=0.5)
    with pytest.raises(ConfigError, match="expected true or false"):
        GaussianPosterior(amortized="yes")
    assert GaussianPosterior().options.gamma == 0.5  # focused by default


def test_amortized_proposals_are_prior_draws(store):
    est = trained(GaussianPosterior, store, max_epochs=1, amortized=True)
    proposal = est.sample_proposal(4000, {"x": X_ON}, rng=np.random.default_rng(0))["value"]
    # the prior U(−1, 1)²: σ = 0.577, nowhere near the posterior at X_ON (σ ≈ 0.01)
    np.testing.assert_allclose(proposal.std(0), 2 / np.sqrt(12), rtol=0.05)


# -- K23: each observation of a batch -------------------------------------------------------------


def test_k23_each_row_of_a_batch_is_checked_and_named(gaussian):
    est = fresh(gaussian)
    rows = np.array([[0.3, -0.2, 0.0], [1e4, 0.0, 0.0]])
    batch = np.repeat(rows, 300, axis=0)  # as batched sampling gives: each row for its draws
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.sample_posterior(600, {"x": batch}, rng=np.random.default_rng(3))
    texts = [str(w.message) for w in caught if isinstance(w.message, ObservationWarning)]
    far = [t for t in texts if "far outside" in t]
    edge = [t for t in texts if "edge of the prior's support" in t]
    assert len(far) == 1 and "observation row 1:" in far[0] and "x[0] = 1e+04" in far[0]
    assert len(edge) == 1 and "observation row 1:" in edge[0]
    assert not [t for t in texts if "observation row 0:" in t and "far outside" in t]
    assert {f["row"] for f in est._conditions.findings if f["kind"] in ("far", "edge")} == {1}
    with warnings.catch_warnings(record=True) as again:  # warned once per message
        warnings.simplefilter("always")
        est.sample_posterior(600, {"x": batch}, rng=np.random.default_rng(4))
    assert not [w for w in again if isinstance(w.message, ObservationWarning)]


def test_k23_per_row_conditions_are_not_checked(gaussian):
    est = fresh(gaussian)
    x = np.random.default_rng(0).normal(size=(50, 3)) * 1e4  # no row repeats
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.sample_posterior(50, {"x": x}, rng=np.random.default_rng(3))
    assert not [w for w in caught if isinstance(w.message, ObservationWarning)]
