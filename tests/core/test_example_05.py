"""Example 05 (linear regression): simulators, the committed observation, its exact posterior."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from kestrel_core import call_simulator, prior_from_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "05_linear_regression"


@pytest.fixture(scope="module")
def model():
    spec = importlib.util.spec_from_file_location("kestrel_example05_model", EXAMPLE / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def obs():
    with np.load(EXAMPLE / "data" / "obs.npz") as f:
        return {k: f[k] for k in f.files}


def test_design_matrix_is_the_sine_basis(model):
    phi = model.design_matrix()
    assert phi.shape == (1000, 10) and phi.dtype == np.float64
    t = 2 * np.pi * 7 / 1000
    assert phi[7, 2] == pytest.approx(np.sin(3 * t), abs=1e-15)
    # sines of distinct integer frequencies on a full period are orthogonal: Phi^T Phi = n/2 I
    np.testing.assert_allclose(phi.T @ phi, 500 * np.eye(10), atol=1e-9)


def test_simulators_through_the_boundary(model):
    theta = np.random.default_rng(0).standard_normal((4, 10))
    mu = call_simulator("mu", model.Signal(), 4, [theta])
    assert mu.shape == (4, 1000) and mu.dtype == np.float64
    np.testing.assert_allclose(mu, theta @ model.design_matrix().T)
    noise = model.Noise(sigma=0.1)
    x1 = call_simulator("x", noise, 4, [mu], rng=np.random.default_rng(1))
    x2 = call_simulator("x", noise, 4, [mu], rng=np.random.default_rng(1))
    np.testing.assert_array_equal(x1, x2)
    assert (x1 - mu).std() == pytest.approx(0.1, rel=0.05)
    xb = call_simulator("x", noise, 3, [mu[:1]], rng=np.random.default_rng(2))  # broadcast mu
    assert xb.shape == (3, 1000) and not np.array_equal(xb[0], xb[1])


def test_committed_observation_and_its_posterior(model, obs):
    assert {k: v.shape for k, v in obs.items()} == {
        "x": (1000,),
        "theta_true": (10,),
        "posterior_mean": (10,),
        "posterior_cov": (10, 10),
    }
    phi, sigma = model.design_matrix(), 0.1
    precision = phi.T @ phi / sigma**2 + np.eye(10)  # independent route: solve, not inv
    np.testing.assert_allclose(
        obs["posterior_mean"], np.linalg.solve(precision, phi.T @ obs["x"]) / sigma**2, rtol=1e-12
    )
    np.testing.assert_allclose(obs["posterior_cov"] @ precision, np.eye(10), atol=1e-12)
    std = np.sqrt(np.diag(obs["posterior_cov"]))
    assert (np.abs(obs["posterior_mean"] - obs["theta_true"]) < 5 * std).all()
    residual = obs["x"] - phi @ obs["theta_true"]
    assert residual.std() == pytest.approx(sigma, rel=0.1)


@pytest.mark.parametrize("blas_threads", ["1", "2"])
def test_k35_make_observation_reproduces_the_committed_arrays(obs, tmp_path, blas_threads):
    """Seeded draws are compared bit for bit; results of BLAS (the matrix product of the
    signal, the inverse behind the posterior) only to a tolerance, since their last digits
    depend on the BLAS build and its thread count."""
    out = tmp_path / "obs.npz"
    code = f"import numpy as np, make_observation as m; np.savez({str(out)!r}, **m.make())"
    env = {
        **os.environ,
        **{
            var: blas_threads
            for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
        },
    }
    subprocess.run([sys.executable, "-c", code], cwd=EXAMPLE / "data", check=True, env=env)
    with np.load(out) as fresh:
        assert sorted(fresh.files) == sorted(obs)
        np.testing.assert_array_equal(fresh["theta_true"], obs["theta_true"])  # seeded draw
        for key in ("x", "posterior_mean", "posterior_cov"):  # derived through BLAS
            np.testing.assert_allclose(fresh[key], obs[key], rtol=1e-10, atol=1e-12, err_msg=key)


def test_config_prior_is_a_standard_normal_in_ten_dimensions():
    cfg = yaml.safe_load((EXAMPLE / "config.yml").read_text())
    theta = cfg["graph"]["theta"]
    prior = prior_from_spec(theta["simulator"], path="graph.theta.simulator.priors")
    assert prior.specs == [["normal", 0.0, 1.0]] * 10
    assert theta["simulator"]["_target_"] == "kestrel_core.Product"
    assert (theta["evidence"], theta["scaffolds"]) == (["x"], ["mu"])
    assert cfg["buffer"] == {
        "min_samples": 2048,
        "max_samples": 8192,
        "validation_samples": 1024,
        "simulate_count": 448,
        "epochs_per_round": 1,
    }
