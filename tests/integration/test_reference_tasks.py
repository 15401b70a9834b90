"""The reference tasks of the SBI benchmark (examples 07, 08, 09): simulators and references.

Fast checks (numpy only, about a second each): every example's simulator draws from the
likelihood its data script samples the reference posterior with, and the committed reference
samples (``data/obs.npz['reference_samples']``) agree with the exact posterior — the analytic
one (Gaussian linear) or importance-weighted moments of the likelihood (two moons, SLCP).
The C2ST accuracy check of a Kestrel run is in ``test_reference_accuracy.py``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from kestrel_core import load_config, sample_forward

from .helpers import EXAMPLES, REPO, example

TASKS = {"07_two_moons": 2, "08_slcp": 5, "09_gaussian_linear": 10}


def load_model(task: str):
    """``examples/<task>/model.py`` as a module of its own (every example names it model)."""
    path = EXAMPLES / task / "model.py"
    spec = importlib.util.spec_from_file_location(f"kestrel_example_{task}_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_obs(task: str) -> dict[str, np.ndarray]:
    with np.load(EXAMPLES / task / "data" / "obs.npz") as data:
        return {k: data[k] for k in data.files}


def weighted_moments(theta: np.ndarray, logw: np.ndarray):
    """Self-normalised importance-sampling mean (D,), σ (D,) and effective sample size."""
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ theta
    return mean, np.sqrt(w @ (theta - mean) ** 2), 1.0 / np.sum(w**2)


def test_observations_are_observation_1_of_the_benchmark():
    # benchmark-tasks.md gives them at float32 precision
    expected = {
        "07_two_moons": (0, -0.6396706104278564),
        "08_slcp": (4, -10.436423301696777),
        "09_gaussian_linear": (9, 0.24496139585971832),
    }
    for task, dim in TASKS.items():
        obs = load_obs(task)
        index, value = expected[task]
        assert obs["x"][index] == value, task
        np.testing.assert_array_equal(obs["x"].astype(np.float32), obs["x"])
        assert obs["theta_true"].shape == (dim,), task
        assert obs["reference_samples"].shape == (10_000, dim), task
        assert obs["reference_samples"].dtype == np.float32, task


@pytest.mark.parametrize("task", sorted(TASKS))
def test_config_loads_and_simulates_in_process(task):
    """The config as committed: nodes theta and x, the observation's shape, 10 000 simulations
    (``min_samples + validation_samples`` from the prior, then up to ``max_samples``)."""
    cfg = load_config(example(task), check_targets=("simulator", "estimator"))
    assert sorted(cfg.graph.nodes) == ["theta", "x"] and cfg.graph.latents == ["theta"]
    assert cfg.buffer is not None and not cfg.buffer.simulate_when_full
    assert cfg.buffer.max_samples + cfg.buffer.validation_samples == 10_000
    draws = sample_forward(cfg.graph, 5, seed=0)
    assert draws["theta.value"].shape == (5, TASKS[task])
    assert draws["x.value"].shape == (5, *load_obs(task)["x"].shape)
    assert np.isfinite(draws["x.value"]).all()


# --- two moons ----------------------------------------------------------------------------


def test_two_moons_simulator_draws_from_its_likelihood():
    model = load_model("07_two_moons")
    theta = np.array([0.3, -0.2])
    x = model.TwoMoons().simulate_batch(
        200_000, np.tile(theta, (200_000, 1)), np.random.default_rng(0)
    )
    # the likelihood on a fine grid around the half ring: normalised, with the draws' moments
    centre = model.shift(theta) + [model.CENTRE, 0.0]
    axes = [np.linspace(c - 0.16, c + 0.16, 641) for c in centre]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
    p = np.exp(model.log_likelihood(theta, grid))
    cell = (axes[0][1] - axes[0][0]) * (axes[1][1] - axes[1][0])
    assert p.sum() * cell == pytest.approx(1.0, abs=0.01)
    w = p / p.sum()
    mean = w @ grid
    np.testing.assert_allclose(x.mean(0), mean, atol=3e-4)
    np.testing.assert_allclose(x.std(0), np.sqrt(w @ (grid - mean) ** 2), rtol=0.01)
    assert np.all(model.log_likelihood(theta, x) <= model.max_log_likelihood())


def test_two_moons_reference_matches_the_likelihood():
    model = load_model("07_two_moons")
    obs = load_obs("07_two_moons")
    ref = obs["reference_samples"].astype(np.float64)
    theta = np.random.default_rng(1).uniform(-1.0, 1.0, size=(2_000_000, 2))
    logw = model.log_likelihood(theta, obs["x"])  # the prior is uniform
    # the two crescents (the sign of z_0) hold half the mass each; compare each on its own
    side, ref_side = model.rotate(theta)[:, 0] > 0, model.rotate(ref)[:, 0] > 0
    w = np.exp(logw - logw.max())
    assert ref_side.mean() == pytest.approx(w[side].sum() / w.sum(), abs=0.03)
    for s in (True, False):
        mean, std, ess = weighted_moments(theta[side == s], logw[side == s])
        assert ess > 3000
        own = ref[ref_side == s]
        np.testing.assert_array_less(np.abs(own.mean(0) - mean) / std, 0.08)
        np.testing.assert_allclose(own.std(0, ddof=1), std, rtol=0.05)
    # the true parameters lie on a crescent: the likelihood there is not far below its best
    assert model.log_likelihood(obs["theta_true"], obs["x"]) > model.max_log_likelihood() - 8


def test_two_moons_data_script_reproduces_the_committed_file():
    code = (
        "import sys, numpy as np; sys.path.insert(0, 'examples/07_two_moons/data');"
        "import make_data; new = make_data.make();"
        "old = np.load('examples/07_two_moons/data/obs.npz');"
        "assert sorted(new) == sorted(old.files), (sorted(new), old.files);"
        "assert all(np.array_equal(new[k], old[k]) for k in new); print('same')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "same", out.stderr


# --- SLCP ---------------------------------------------------------------------------------


def test_slcp_simulator_draws_from_its_likelihood():
    model = load_model("08_slcp")
    theta = np.array([0.5, -1.0, 1.2, -0.8, 0.7])
    n = 100_000
    x = model.SLCP().simulate_batch(n, np.tile(theta, (n, 1)), np.random.default_rng(2))
    draws = x.reshape(-1, 2)
    cov = model.covariance(theta)
    np.testing.assert_allclose(draws.mean(0), theta[:2], atol=0.02)
    np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.02, atol=0.005)
    # E[log N(x; m, S)] over four independent 2-D draws = -4 (1 + log 2π) - 2 log det S
    loglik = np.array([model.log_likelihood(theta, row) for row in x[:20_000]])
    expected = -4 * (1 + np.log(2 * np.pi)) - 2 * np.log(np.linalg.det(cov))
    assert loglik.mean() == pytest.approx(expected, abs=0.06)


def test_slcp_reference_matches_the_likelihood():
    """Importance sampling with a proposal fitted to the reference: 90 % a Gaussian with 1.5
    times its spread, 10 % the prior, on the folded box (theta_2, theta_3 > 0), where the
    posterior has one mode; the weights p(x | θ) p(θ) / q(θ) correct any misfit."""
    model = load_model("08_slcp")
    obs = load_obs("08_slcp")
    ref = obs["reference_samples"].astype(np.float64)
    folded = ref.copy()
    folded[:, 2:4] = np.abs(folded[:, 2:4])
    rng = np.random.default_rng(3)
    n, n_gauss = 400_000, 360_000
    centre, cov = folded.mean(0), np.cov(folded.T) * 1.5**2
    theta = np.concatenate(
        [
            rng.multivariate_normal(centre, cov, size=n_gauss),
            rng.uniform([-3, -3, 0, 0, -3], 3.0, size=(n - n_gauss, 5)),
        ]
    )
    inside = np.all(np.abs(theta) <= 3.0, axis=1) & (theta[:, 2] > 0) & (theta[:, 3] > 0)
    d = theta - centre
    log_gauss = -0.5 * np.einsum("ni,ij,nj->n", d, np.linalg.inv(cov), d)
    log_gauss -= 0.5 * np.log(np.linalg.det(2 * np.pi * cov))
    log_q = np.logaddexp(np.log(0.9) + log_gauss, np.log(0.1) - np.log(6.0**3 * 3.0**2))
    logw = np.where(inside, model.log_likelihood(theta, obs["x"]) - log_q, -np.inf)
    mean, std, ess = weighted_moments(theta, logw)
    assert ess > 10_000
    np.testing.assert_array_less(np.abs(folded.mean(0) - mean) / std, 0.05)
    np.testing.assert_allclose(folded.std(0, ddof=1), std, rtol=0.04)
    # the four modes: the signs of theta_2 and theta_3, each independent and even
    signs = ref[:, 2:4] > 0
    np.testing.assert_allclose(signs.mean(0), 0.5, atol=0.02)
    assert np.mean(signs[:, 0] == signs[:, 1]) == pytest.approx(0.5, abs=0.02)


# --- Gaussian linear ----------------------------------------------------------------------


def test_gaussian_linear_simulator_and_analytic_posterior():
    model = load_model("09_gaussian_linear")
    theta = np.linspace(-0.5, 0.5, 10)
    x = model.GaussianNoise(0.1).simulate_batch(
        50_000, np.tile(theta, (50_000, 1)), np.random.default_rng(4)
    )
    np.testing.assert_allclose(x.mean(0), theta, atol=0.006)
    np.testing.assert_allclose(x.var(0), 0.1, rtol=0.03)
    loglik = model.log_likelihood(theta, x)
    assert loglik.mean() == pytest.approx(-5 * (1 + np.log(2 * np.pi * 0.1)), abs=0.05)
    mean, cov = model.analytic_posterior(np.arange(10.0))
    np.testing.assert_allclose(mean, np.arange(10.0) / 2)  # N(x/2, 0.05 I)
    np.testing.assert_allclose(cov, 0.05 * np.eye(10))


def test_gaussian_linear_reference_matches_the_analytic_posterior():
    obs = load_obs("09_gaussian_linear")
    ref = obs["reference_samples"].astype(np.float64)
    mean, cov = obs["posterior_mean"], obs["posterior_cov"]
    np.testing.assert_allclose(mean, obs["x"] / 2)
    std = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(ref.mean(0) - mean) / std, 0.04)
    np.testing.assert_allclose(ref.std(0, ddof=1), std, rtol=0.03)
    corr = np.corrcoef(ref.T)[np.triu_indices(10, 1)]
    np.testing.assert_array_less(np.abs(corr), 0.04)  # independent components
