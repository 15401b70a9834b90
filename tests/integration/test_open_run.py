"""Issue 33 item 1: a run as a Python object — ``kestrel.open_run(RUN)`` / ``RunResult.open()``.

One toy run (z ~ U(0, 1)², x = z + N(0, 0.05²), a Gaussian estimator trained 2 epochs) launched
in this process on the session's Ray serves every test; everything the ``Run`` does is in this
process without Ray and writes nothing into the run folder (except ``check_calibration``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import yaml

import kestrel
from kestrel import Posterior, Prior, Run, open_run, sample_run
from kestrel_core import ConfigError, EstimatorError, ShapeError

from .test_launch import listing, toy

BATCH = np.array([[0.4, 0.6], [0.1, 0.9], [0.8, 0.2]])


@pytest.fixture(scope="module")
def launched(tmp_path_factory, ray_session):
    """``kestrel.launch`` of the toy (no automatic samples): the run folder and its result."""
    tmp = tmp_path_factory.mktemp("open_run")
    config = tmp / "config.yml"
    config.write_text(yaml.safe_dump(toy(tmp)))
    result = kestrel.launch(str(config), str(tmp / "run"), seed=11, auto_sample=False)
    assert result.status == "completed", result
    return tmp / "run", result


@pytest.fixture(scope="module")
def run(launched) -> Run:
    return launched[1].open()


def test_open_run_and_run_result_open_give_a_run(launched, run):
    folder, result = launched
    assert isinstance(run, Run) and isinstance(result, kestrel.RunResult)
    assert isinstance(run.posterior, Posterior) and isinstance(run.prior, Prior)
    assert run.path == os.path.abspath(folder)
    assert (run.latents, run.observed) == (["z"], ["x"])
    assert open_run(folder).path == run.path


def test_posterior_sample_shapes_for_one_and_for_m_observations(run):
    one = run.posterior.sample(50, seed=1)
    assert list(one) == ["z"] and one["z"].shape == (50, 2)
    assert run.posterior.last_seed == 1
    many = run.posterior.sample(40, x=BATCH, seed=2)
    assert many["z"].shape == (3, 40, 2)
    again = run.posterior.sample(40, x=BATCH, seed=2)
    np.testing.assert_array_equal(many["z"], again["z"])
    fresh = run.posterior.sample(5)
    assert isinstance(run.posterior.last_seed, int) and fresh["z"].shape == (5, 2)


def test_same_seed_gives_the_arrays_of_sample_runs_file(launched, run):
    folder, _ = launched
    written = sample_run(folder, "posterior", n=300, seed=7)
    with np.load(written.path) as f:
        np.testing.assert_array_equal(run.posterior.sample(300, seed=7)["z"], f["z"])
    batch = sample_run(folder, "posterior", n=20, seed=8, observation=BATCH)
    with np.load(batch.path) as f:
        np.testing.assert_array_equal(run.posterior.sample(20, x=BATCH, seed=8)["z"], f["z"])
    ppd = sample_run(folder, "ppd", n=10, seed=9)
    got = run.ppd(10, seed=9)
    with np.load(ppd.path) as f:
        assert set(f.files) == set(got)
        for key in f.files:
            np.testing.assert_array_equal(got[key], f[key])


def test_log_prob_is_finite_inside_and_minus_inf_outside_the_support(run):
    theta = np.array([[0.4, 0.6], [0.5, 0.5], [1.5, 0.0], [0.2, -0.1]])
    lp = run.posterior.log_prob(theta)
    assert lp.shape == (4,) and lp.dtype == np.float64
    assert np.isfinite(lp[:2]).all() and (lp[2:] == -np.inf).all()
    assert np.array_equal(run.posterior.log_prob({"z": theta}), lp)
    batched = run.posterior.log_prob(theta, x=BATCH)
    assert batched.shape == (3, 4)
    np.testing.assert_allclose(batched[0], lp)  # BATCH[0] is the run's own observation
    assert (batched[:, 2:] == -np.inf).all() and np.isfinite(batched[:, :2]).all()
    draws = run.posterior.sample(20, seed=3)["z"]
    assert np.isfinite(run.posterior.log_prob(draws)).all()


def test_prior_and_ppd_shapes(run):
    prior = run.prior.sample(30, seed=4)
    assert {k: v.shape for k, v in prior.items()} == {"z": (30, 2), "x": (30, 2)}
    lp = run.prior.log_prob(np.array([[0.5, 0.5], [2.0, 0.5]]))
    np.testing.assert_allclose(lp, [0.0, -np.inf])  # U(0, 1)²: density 1 inside
    ppd = run.ppd(12, seed=5)
    assert {k: v.shape for k, v in ppd.items()} == {"z": (12, 2), "x": (12, 2)}
    assert run.ppd(6, x=BATCH, seed=5)["x"].shape == (3, 6, 2)


def test_status_and_metrics(run):
    assert run.status["status"] == "completed"
    table = run.metrics["z"]
    epochs = np.asarray(table["epoch"])
    assert len(epochs) == 2 and np.isfinite(np.asarray(table["train_loss"])).all()


def test_status_of_a_damaged_file_is_empty_with_a_warning(launched, tmp_path):
    folder, _ = launched
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    (copy / "status.json").write_text("{not json")
    with pytest.warns(UserWarning, match="status.json"):
        assert open_run(copy).status == {}


def test_plot_returns_a_figure(run):
    pytest.importorskip("matplotlib")
    pytest.importorskip("corner")
    from matplotlib.figure import Figure

    fig = run.plot(n=300, seed=1)
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    assert isinstance(run.plot(run.posterior.sample(200, seed=2)), Figure)


def test_to_arviz(run):
    pytest.importorskip("arviz")
    idata = run.to_arviz(n=100, seed=1)
    assert idata.posterior["z"].shape == (1, 100, 2)
    assert "x" in idata.observed_data


def test_sample_and_log_prob_write_nothing(launched, run):
    folder, _ = launched
    before = listing(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run.posterior.sample(10, seed=1)
        run.posterior.sample(10, x=BATCH, seed=1)
        run.posterior.log_prob(np.array([[0.5, 0.5]]), x=BATCH)
        run.prior.sample(10, seed=1)
        run.prior.log_prob(np.array([[0.5, 0.5]]))
        run.ppd(10, seed=1)
        _ = run.status, run.metrics
    assert listing(folder) == before


def test_not_a_run_and_bad_x_are_clear_errors(run, tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        open_run(tmp_path)
    with pytest.raises(ShapeError, match=r"observation has shape \(3,\)"):
        run.posterior.sample(5, x=np.zeros(3))
    with pytest.raises(ShapeError, match=r"observation has shape \(3,\)"):
        run.posterior.log_prob(np.array([[0.5, 0.5]]), x=np.zeros(3))
    with pytest.raises(ConfigError, match="observation holds nan"):
        run.posterior.sample(5, x=np.array([np.nan, 0.5]))
    with pytest.raises(ConfigError, match="'y' is not an observed node"):
        run.posterior.sample(5, x={"y": np.zeros(2)})
    with pytest.raises(ShapeError, match=r"theta\['z'\] has shape \(2,\); expected rows \(n, 2\)"):
        run.posterior.log_prob(np.array([0.5, 0.5]))
    with pytest.raises(ConfigError, match="expected every latent node: z"):
        run.posterior.log_prob({"w": np.zeros((1, 2))})
    with pytest.raises(ConfigError, match="positive number of samples"):
        run.posterior.sample(0)


def test_a_run_without_weights_says_so_as_kestrel_sample_does(launched, tmp_path):
    folder, _ = launched
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    for name in os.listdir(copy / "graph" / "z"):  # the weights and their marker
        if name != "metrics.csv" and not name.endswith(".log"):
            os.remove(copy / "graph" / "z" / name)
    opened = open_run(copy)  # status, metrics and the prior still work
    assert opened.prior.sample(3, seed=1)["z"].shape == (3, 2)
    with pytest.raises(EstimatorError, match=r"node 'z': no saved weights .* trained estimator"):
        opened.posterior.sample(5)
    with pytest.raises(EstimatorError, match="no saved weights"):
        opened.posterior.log_prob(np.array([[0.5, 0.5]]))
    with pytest.raises(EstimatorError, match="no saved weights"):
        sample_run(copy, "posterior", n=5)


def test_a_fresh_process_samples_without_starting_ray(launched):
    folder, _ = launched
    code = (
        "import sys, numpy as np, kestrel; run = kestrel.open_run(sys.argv[1]); "
        "z = run.posterior.sample(300, seed=7)['z']; import ray; "
        "print(ray.is_initialized(), z.shape); np.save(sys.argv[2], z)"
    )
    out = folder.parent / "fresh.npy"
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(out)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "False (300, 2)"
    written = sample_run(folder, "posterior", n=300, seed=7)
    with np.load(written.path) as f:
        np.testing.assert_array_equal(np.load(out), f["z"])


NOISE = """
class Noise:
    def simulate_batch(self, n, mu, rng=None):
        return mu + 0.05 * rng.standard_normal(mu.shape)
"""


def test_open_run_follows_the_trust_model(launched, tmp_path, monkeypatch):
    """K41: a run folder naming code outside Kestrel and its code folders opens only with the
    user's word (``trust=True``, ``--trust``), which the run's later draws keep."""
    folder, _ = launched
    elsewhere = tmp_path / "elsewhere"  # not one of the run's code folders (paths.imports)
    elsewhere.mkdir()
    (elsewhere / "k33_noise.py").write_text(NOISE)
    monkeypatch.syspath_prepend(str(elsewhere))
    copy = tmp_path / "copy" / "run"
    shutil.copytree(folder, copy)
    data = yaml.safe_load((copy / "config.yml").read_text())
    data["graph"]["x"]["simulator"] = {"_target_": "k33_noise.Noise"}
    (copy / "config.yml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"refused.*'k33_noise\.Noise'.*trust=True"):
        open_run(copy)
    assert "k33_noise" not in sys.modules
    trusted = open_run(copy, trust=True)
    assert trusted.ppd(4, seed=1)["x"].shape == (4, 2)
    assert "k33_noise" in sys.modules
