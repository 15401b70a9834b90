"""Example 06 (SIR, your own model): the simulator, the committed observation and its grid
reference posterior (issue 9, item 7)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from kestrel_core import call_simulator, load_config, prior_from_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "06_sir"


def _module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model():
    return _module("kestrel_example06_model", EXAMPLE / "model.py")


@pytest.fixture(scope="module")
def make_data(model):
    sys.modules["model"], saved = model, sys.modules.get("model")
    try:
        return _module("kestrel_example06_make_data", EXAMPLE / "data" / "make_data.py")
    finally:
        if saved is None:
            del sys.modules["model"]
        else:
            sys.modules["model"] = saved


@pytest.fixture(scope="module")
def obs():
    with np.load(EXAMPLE / "data" / "obs.npz") as f:
        return {k: f[k] for k in f.files}


def test_the_sir_curve_conserves_people_and_converges_in_the_step(model):
    theta = np.array([[0.4, 0.15], [0.9, 0.1], [0.12, 0.45]])
    cases = model.expected_cases(theta)
    assert cases.shape == (3, 60) and (cases >= 0).all()
    fine = model.expected_cases(theta, steps_per_day=200)
    np.testing.assert_allclose(cases, fine, rtol=1e-5, atol=1e-6)
    # everyone infected is counted once: at most the susceptible population
    assert (cases.sum(1) <= model.POPULATION - model.INFECTED0 + 1e-9).all()
    assert cases[2].sum() < 20  # R0 < 1: no epidemic


def test_the_simulator_through_the_boundary(model):
    theta = np.tile([0.4, 0.15], (4, 1))
    x1 = call_simulator("x", model.SIR(), 4, [theta], rng=np.random.default_rng(1))
    x2 = call_simulator("x", model.SIR(), 4, [theta], rng=np.random.default_rng(1))
    assert x1.shape == (4, 60) and x1.dtype == np.float64
    np.testing.assert_array_equal(x1, x2)
    assert np.array_equal(x1, np.round(x1)) and not np.array_equal(x1[0], x1[1])


def test_committed_observation_is_the_seeded_draw(model, make_data, obs):
    rng = np.random.default_rng(make_data.SEED)
    x = model.SIR().simulate_batch(1, make_data.THETA_TRUE[None], rng=rng)[0]
    np.testing.assert_array_equal(x, obs["x"])
    np.testing.assert_array_equal(obs["theta_true"], [0.4, 0.15])


def test_grid_posterior_is_consistent(make_data, obs):
    mean, std = obs["posterior_mean"], obs["posterior_std"]
    np.testing.assert_allclose(std, np.sqrt(np.diag(obs["posterior_cov"])), rtol=1e-12)
    # an independent, coarser grid agrees to a few per cent of σ
    coarse = make_data.grid_posterior(obs["x"], n=121, coarse=150)
    assert np.all(np.abs(coarse["posterior_mean"] - mean) < 0.02 * std)
    np.testing.assert_allclose(coarse["posterior_std"], std, rtol=0.02)
    ref = obs["reference_samples"]
    assert ref.shape == (20000, 2)
    assert np.all(np.abs(ref.mean(0) - mean) < 0.05 * std)
    np.testing.assert_allclose(ref.std(0), std, rtol=0.03)
    assert np.all(np.abs(obs["theta_true"] - mean) < 3 * std)


def test_config_is_what_the_readme_writes(make_data):
    cfg = yaml.safe_load((EXAMPLE / "config.yml").read_text())
    theta = cfg["graph"]["theta"]
    prior = prior_from_spec(theta["simulator"], path="graph.theta.simulator.priors")
    box = [[s[1], s[2]] for s in prior.specs]
    np.testing.assert_array_equal(box, make_data.PRIOR_BOX)
    assert theta["names"] == ["beta", "gamma"]
    # the estimator with its defaults: no hand-tuned schedule
    assert set(theta["estimator"]) == {"_target_", "max_epochs"}
    loaded = load_config(EXAMPLE / "config.yml")
    assert loaded.graph.nodes["theta"].names == ("beta", "gamma")
