"""``kestrel sample`` in one process: samples per observation, no Ray, same draws as on Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import ray

import kestrel.session._session
import kestrel_ray.graph._deployment
from kestrel import RunDir, launch, sample_run
from kestrel.rundir._samplefiles import OBSERVATION_FILE, observation_digest
from kestrel.sample._observations import parse_observation_args
from kestrel.sample._sampling import needs_ray
from kestrel_core import ConfigError, ShapeError, load_config

from .helpers import REPO
from .test_launch import toy


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ray_session):
    """A toy run trained for 2 epochs (z ~ U(0, 1)², x = z + noise observed at [0.4, 0.6]);
    amortized (prior draws only), so sampling it at other observations is what it is for."""
    tmp = tmp_path_factory.mktemp("sample_local")
    estimator = {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2, "amortized": True}
    launch(toy(tmp, estimator=estimator), tmp / "run", seed=11, progress=False, auto_sample=False)
    return tmp / "run"


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if anything starts Ray, joins it or deploys actors."""

    def boom(*args, **kwargs):
        raise AssertionError("Ray was used")

    monkeypatch.setattr(ray, "init", boom)
    monkeypatch.setattr(kestrel_ray.graph._deployment.Deployment, "deploy", boom)
    monkeypatch.setattr(kestrel.session._session.RunSession, "for_sample", boom)
    started = ray.is_initialized()
    yield
    assert ray.is_initialized() == started


def test_samples_per_observation_each_folder_with_its_observation(trained, tmp_path, no_ray):
    # a copy without samples: the module's other tests sample the shared run, in any order
    trained = Path(shutil.copytree(trained, tmp_path / "run"))
    shutil.rmtree(trained / "samples", ignore_errors=True)
    run = RunDir(trained)
    own = np.array([0.4, 0.6])
    default = sample_run(trained, "posterior", n=4, seed=1)
    assert not default.ray and default.observation == observation_digest({"x": own})
    assert (
        Path(default.path) == trained / "samples" / "posterior" / default.observation / "000000.npz"
    )

    np.save(tmp_path / "a.npy", np.array([0.1, 0.9]))
    np.savez(tmp_path / "b.npz", b=np.array([0.9, 0.1]), other=np.zeros(5))
    first = sample_run(trained, "posterior", n=4, observation=str(tmp_path / "a.npy"))
    second = sample_run(
        trained, "posterior", n=4, observation=parse_observation_args([f"x={tmp_path}/b.npz:b"])
    )
    # an observed= override is another observation too: its own folder (the same as `a`'s)
    override = sample_run(
        trained, "posterior", n=4, overrides=[f"graph.x.observed={tmp_path}/a.npy"]
    )
    assert override.observation == first.observation and override.path.endswith("000001.npz")

    digests = {default.observation, first.observation, second.observation}
    assert len(digests) == 3
    folders = {p.parent.name for p in (trained / "samples" / "posterior").glob("*/0*.npz")}
    assert folders == digests
    for result, x in ((default, own), (first, [0.1, 0.9]), (second, [0.9, 0.1])):
        with np.load(Path(result.path).parent / OBSERVATION_FILE) as obs:
            np.testing.assert_array_equal(obs["x"], x)
        np.testing.assert_array_equal(run.sample_observation(result.path)["x"], x)
    assert run.latest_sample_file("posterior") == override.path
    assert run.latest_sample_file("posterior", second.observation) == second.path
    assert run.read_samples("posterior", default.observation)["z"].shape == (4, 2)

    prior = sample_run(trained, "prior", n=3, seed=2)
    assert prior.path == str(trained / "samples" / "prior" / "000000.npz") and not prior.ray


def test_observation_errors_are_caught_before_drawing(trained, tmp_path, no_ray):
    np.save(tmp_path / "three.npy", np.zeros(3))
    with pytest.raises(ShapeError, match=r"node 'x'.*\(3,\)"):
        sample_run(trained, "posterior", n=2, observation=str(tmp_path / "three.npy"))
    with pytest.raises(ConfigError, match="prior samples do not depend on an observation"):
        sample_run(trained, "prior", n=2, observation=str(tmp_path / "three.npy"))
    with pytest.raises(ConfigError, match="'z' is not an observed node"):
        sample_run(trained, "posterior", n=2, observation={"z": np.zeros(2)})
    with pytest.raises(ConfigError, match="name each node"):
        parse_observation_args(["a.npy", "b.npy"])


def test_in_process_draws_equal_the_ray_draws(trained, no_leaked_actors):
    for mode in ("prior", "posterior"):
        here = sample_run(trained, mode, n=40, seed=5)
        on_ray = sample_run(trained, mode, n=40, seed=5, ray=True)
        assert not here.ray and on_ray.ray
        with np.load(here.path) as a, np.load(on_ray.path) as b:
            assert sorted(a.files) == sorted(b.files)
            for key in a.files:
                np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-9)


def test_prior_sampling_needs_neither_ray_nor_torch(trained):
    code = (
        "import sys; from kestrel import sample_run; "
        f"r = sample_run({str(trained)!r}, 'prior', n=3, seed=0); "
        "assert not r.ray; bad = {'ray', 'torch'} & set(sys.modules); assert not bad, bad"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stderr


def test_ray_only_where_a_cluster_is_named_or_a_simulator_runs_in_parallel(tmp_path):
    cfg = toy(tmp_path)
    config = load_config(cfg)
    assert needs_ray(config, "posterior") is None and needs_ray(config, "ppd") is None
    assert "--address" in needs_ray(config, "posterior", "10.0.0.1:6379")
    cfg["graph"]["x"]["num_actors"] = 2
    parallel = load_config(cfg)
    assert needs_ray(parallel, "posterior") is None  # x is observed: not simulated
    assert "node 'x'" in needs_ray(parallel, "ppd") and "node 'x'" in needs_ray(parallel, "prior")


def test_demo_removes_its_temporary_run_directory(tmp_path, monkeypatch):
    import kestrel

    sys.path.insert(0, str(REPO / "examples" / "05_linear_regression"))
    try:
        import demo
    finally:
        sys.path.pop(0)
    seen = []

    def fake_launch(config, run_dir, **kwargs):
        seen.append(run_dir)
        raise KeyboardInterrupt  # the user stops the demo

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(kestrel, "launch", fake_launch)
    with pytest.raises(KeyboardInterrupt):
        demo.main([])
    assert seen and Path(seen[0]).name.startswith("kestrel-demo-05-")
    assert not os.path.exists(seen[0]) and not list(tmp_path.iterdir())


def test_k28_foreign_observation_arrays_give_the_native_posterior(trained, no_ray):
    x = np.array([0.1, 0.9])
    native = sample_run(trained, "posterior", n=32, seed=3, observation=x)
    wide = np.array([0.1, 7.0, 0.9, 7.0])
    for arr in (x.astype(">f8"), x[::-1].copy()[::-1], wide[::2]):  # big-endian, reversed, strided
        got = sample_run(trained, "posterior", n=32, seed=3, observation=arr)
        assert got.observation == native.observation  # converted exactly like the native array
        with np.load(got.path) as a, np.load(native.path) as b:
            np.testing.assert_array_equal(a["z"], b["z"])
