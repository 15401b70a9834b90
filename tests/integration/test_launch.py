"""``launch`` and ``sample_run`` in this process: faults, resume, seeds, stops (K09, K14, K15, K17)."""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

import kestrel.session._session
from kestrel import RunError, launch, sample_run
from kestrel_core import ConfigError, GraphError, KestrelError, SimulatorError

from .helpers import example, tiny

MODELS = "kestrel_core.testing.models"


def toy(tmp_path, x=f"{MODELS}.Noise", estimator=None, **buffer):
    """z ~ U(0, 1)², x = z + noise (observed from a file), a Gaussian estimator for 2 epochs."""
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([0.4, 0.6]))
    return {
        "buffer": {
            "min_samples": 64,
            "max_samples": 128,
            "validation_samples": 16,
            "simulate_count": 16,
            "simulate_interval": 0.05,
            **buffer,
        },
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": estimator
                or {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2},
            },
            "x": {"simulator": {"_target_": x}, "parents": ["z"], "observed": str(obs)},
        },
        "sample": {"posterior": {"n": 5}, "prior": {"n": 9}},
    }


def listing(root) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``root``."""
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(folder, f))
            out[os.path.relpath(os.path.join(folder, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_k15_two_launches_in_one_process(tmp_path, no_leaked_actors):
    cfg = toy(tmp_path)
    original = copy.deepcopy(cfg)
    first = launch(cfg, tmp_path / "run1", seed=1, progress=False)
    before = listing(tmp_path / "run1")
    second = launch(cfg, tmp_path / "run2", seed=2, progress=False)

    assert cfg == original  # the config is never modified
    assert first.status == second.status == "completed"
    assert listing(tmp_path / "run1") == before  # run 2 wrote nothing under run1
    assert all(path.startswith(str(tmp_path / "run2")) for path in second.samples.values())
    log2 = (tmp_path / "run2" / "graph" / "driver" / "output.log").read_text()
    assert str(tmp_path / "run2") in log2 and str(tmp_path / "run1") not in log2
    assert "run1" not in (tmp_path / "run2" / "graph" / "z" / "output.log").read_text()
    # where the time went (issue 12 item 1): every launch writes RUN/profile.json
    profile = json.loads((tmp_path / "run2" / "profile.json").read_text())
    assert {
        "preflight",
        "ray_start",
        "starting",
        "initial simulation",
        "training",
        "saving",
        "sampling",
    } <= set(profile["driver"])
    assert abs(sum(p["seconds"] for p in profile["driver"].values()) - profile["wall_s"]) < 0.01
    z = profile["estimators"]["z"]
    assert z["epochs"] == 2 and z["parts"]["steps"]["count"] >= 2 and z["steps_per_s"] > 0
    assert z["parts"]["validation"]["count"] >= 2
    assert profile["actors"]["x"][0]["busy"]["simulate"]["seconds"] > 0
    assert "profile: " in log2


def test_k09_nonfinite_simulations_are_dropped_and_counted(tmp_path, no_leaked_actors):
    result = launch(
        toy(tmp_path, x=f"{MODELS}.SometimesNaN"), tmp_path / "run", seed=3, progress=False
    )

    assert result.status == "completed"
    assert result.nonfinite["x"] > 0 and result.nonfinite.get("z", 0) == 0
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["nonfinite"]["x"] == result.nonfinite["x"]
    # only finite samples reached the buffer: the estimator never saw a non-finite row
    assert "dropped" in (tmp_path / "run" / "graph" / "driver" / "output.log").read_text()
    with np.load(next((tmp_path / "run" / "samples" / "posterior").glob("*/000000.npz"))) as data:
        assert np.isfinite(data["z"]).all()


def test_k09_an_all_invalid_round_is_an_error_naming_the_node(tmp_path, no_leaked_actors):
    with pytest.raises(SimulatorError, match="node 'x'.*non-finite"):
        launch(toy(tmp_path, x=f"{MODELS}.AlwaysNaN"), tmp_path / "run", seed=3, progress=False)
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def test_an_estimator_error_surfaces_with_node_and_traceback(tmp_path, no_leaked_actors):
    cfg = toy(tmp_path, estimator={"_target_": "tests.integration.models.BrokenEstimator"})
    with pytest.raises(RunError) as info:
        launch(cfg, tmp_path / "run", seed=4, progress=False)
    text = str(info.value)
    assert "node 'z'" in text and "estimator exploded on purpose" in text
    assert "Traceback" in text and "models.py" in text  # the actor's own traceback
    assert info.value.node == "z" and info.value.result.status == "failed"
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def test_a_simulator_error_during_resimulation_stops_the_run(tmp_path, no_leaked_actors):
    cfg = toy(tmp_path, x=f"{MODELS}.FailsLater")
    cfg["graph"]["z"]["estimator"]["max_epochs"] = 100_000  # only the failure can end it
    with pytest.raises(RunError) as info:
        launch(cfg, tmp_path / "run", seed=5, progress=False)
    text = str(info.value)
    assert "node 'x'" in text and "simulator broke on purpose in call 3" in text
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def test_k14_resume_continues_the_epoch_counter(tmp_path, no_leaked_actors):
    run = tmp_path / "run"
    first = launch(toy(tmp_path), run, seed=6, progress=False)
    assert first.epochs == {"z": 2} and first.resumed == []
    weights = run / "graph" / "z" / "estimator.pt"
    saved = weights.stat().st_mtime_ns

    # config=None: the run's own config.yml is used
    # max_epochs is a total over the run's launches: 2 loaded + 3 more
    second = launch(None, run, overrides=["graph.z.estimator.max_epochs=5"], seed=7, progress=False)
    assert second.resumed == ["z"]
    assert second.epochs == {"z": 5}
    log = (run / "graph" / "driver" / "output.log").read_text()
    # replaced only by a better model (K31), else kept as it was
    assert weights.stat().st_mtime_ns > saved or "weights kept" in log
    rows = (run / "graph" / "z" / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == [1, 2, 3, 4, 5]
    assert len(list((run / "samples" / "posterior").glob("*/0*.npz"))) == 2


def test_k15_resume_only_when_model_files_exist(tmp_path, no_leaked_actors):
    from kestrel import RunDir
    from kestrel_core import load_config

    run = RunDir(tmp_path / "run")
    run.write_config(load_config(toy(tmp_path), run_dir=run.root))  # a run dir without weights
    result = launch(None, run.root, seed=8, progress=False)
    assert result.resumed == [] and result.epochs == {"z": 2}


def test_seeded_launches_repeat_their_prior_samples(tmp_path, no_leaked_actors):
    snaps = []
    for name in ("a", "b"):
        cfg = toy(tmp_path, snapshot_every=1)
        launch(cfg, tmp_path / name, seed=9, progress=False)
        snaps.append(tmp_path / name / "buffer" / "snapshots")
    initial = 64 + 16
    for i in range(initial):  # the prior simulation, sample by sample
        a, b = (np.load(s / f"{i:06d}.npz") for s in snaps)
        assert sorted(a.files) == sorted(b.files) == ["x.value", "z.log_prob", "z.value"]
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])
    other = toy(tmp_path, snapshot_every=1)
    launch(other, tmp_path / "c", seed=10, progress=False)
    with (
        np.load(snaps[0] / "000000.npz") as a,
        np.load(tmp_path / "c" / "buffer" / "snapshots" / "000000.npz") as c,
    ):
        assert not np.array_equal(a["z.value"], c["z.value"])


def test_sample_run_writes_every_mode(tmp_path, no_leaked_actors):
    run = tmp_path / "run"
    launch(toy(tmp_path), run, seed=11, progress=False, auto_sample=False)
    assert not (run / "samples" / "posterior").exists()

    shapes = {}
    for mode in ("prior", "posterior", "proposal", "ppd"):
        result = sample_run(run, mode, n=6, seed=1)
        with np.load(result.path) as data:
            shapes[mode] = {k: data[k].shape for k in data.files}
        assert result.path == str(
            run / "samples" / mode / (result.observation or "") / "000000.npz"
        )
    assert shapes == {
        "prior": {"z": (6, 2), "x": (6, 2)},
        "posterior": {"z": (6, 2)},
        "proposal": {"z": (6, 2)},
        "ppd": {"z": (6, 2), "x": (6, 2)},
    }
    # the same seed repeats the draws; numbering continues; n from the config
    again = sample_run(run, "prior", n=6, seed=1)
    assert again.path.endswith("000001.npz")
    with np.load(run / "samples" / "prior" / "000000.npz") as a, np.load(again.path) as b:
        for key in ("z", "x"):
            np.testing.assert_array_equal(a[key], b[key])
    from_config = sample_run(run, "prior")
    assert from_config.n == 9 and from_config.path.endswith("000002.npz")


def test_sample_n_missing_from_flag_and_config_is_an_error(tmp_path, no_leaked_actors, monkeypatch):
    run = tmp_path / "run"
    launch(toy(tmp_path), run, seed=12, progress=False, auto_sample=False)
    monkeypatch.setattr(
        kestrel.session._session, "DeployedGraph", None
    )  # must fail before deploying
    with pytest.raises(ConfigError, match=r"sample\.proposal\.n"):
        sample_run(run, "proposal")


def test_sample_without_weights_is_an_error(tmp_path):
    from kestrel import RunDir
    from kestrel_core import load_config

    run = RunDir(tmp_path / "run")
    run.write_config(load_config(toy(tmp_path), run_dir=run.root))
    with pytest.raises(KestrelError, match="node 'z': no saved weights"):
        sample_run(run.root, "posterior", n=3)


def test_initial_samples_from_disk_fill_the_buffer(tmp_path, no_leaked_actors):
    rng = np.random.default_rng(0)
    z = rng.uniform(size=(80, 2))
    np.savez(tmp_path / "prior.npz", z=z, x=z + 0.1 * rng.normal(size=(80, 2)))
    cfg = toy(tmp_path, initial_samples_path=str(tmp_path / "prior.npz"))
    # rounds follow the epochs: enough epochs that some are drawn whatever the machine's speed
    cfg["graph"]["z"]["estimator"]["max_epochs"] = 30
    result = launch(cfg, tmp_path / "run", seed=17, progress=False)
    assert (
        result.status == "completed" and result.simulated > 80
    )  # 80 loaded, then resimulation rounds
    log = (tmp_path / "run" / "graph" / "driver" / "output.log").read_text()
    assert (
        "initial samples: 80 loaded" in log
        and "initial simulation: 0 samples from the prior" in log
    )


def test_simulate_when_full_false_stops_simulating_at_max_samples(tmp_path, no_leaked_actors):
    cfg = toy(tmp_path, max_samples=64, simulate_when_full=False)
    cfg["graph"]["z"]["estimator"]["max_epochs"] = 5
    result = launch(cfg, tmp_path / "run", seed=13, progress=False)
    assert result.simulated == 64 + 16  # the buffer was full from the start: no round simulated


def test_timeout_stops_gracefully(tmp_path, no_leaked_actors):
    config = example("01_minimal")
    overrides = tiny(config) + [
        "graph.z.estimator.max_epochs=1000000",
        "graph.z.estimator.early_stop_patience=1000000",
    ]
    # the time cap counts from the start of the launch: actors start in ~2 s on an idle
    # machine, in ~8 s under load; 25 s leaves room for epochs either way
    result = launch(
        config, tmp_path / "run", overrides=overrides, seed=14, timeout=25, progress=False
    )
    assert result.status == "timeout" and "timeout" in result.reason
    assert 0 < result.epochs["z"] < 1_000_000
    assert (tmp_path / "run" / "graph" / "z" / "saved.json").is_file()
    assert "posterior" in result.samples
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "timeout"


K17_CASES = {
    "misspelt buffer key": (["buffer.max_sample=1000"], ConfigError, "did you mean 'max_samples'"),
    "misspelt estimator kwarg": (
        ["graph.z.estimator.num_epochs=10"],
        ConfigError,
        r"graph\.z\.estimator.*num_epochs.*did you mean 'max_epochs'",
    ),
    "misspelt ray.init kwarg": (
        ["ray.num_gpu=1"],
        ConfigError,
        r"ray\.num_gpu.*did you mean 'num_gpus'",
    ),
    "prior low >= high": (
        ["graph.z.simulator.priors[0]=[uniform,1.0,0.0]"],
        ConfigError,
        r"graph\.z\.simulator\.priors\[0\].*low",
    ),
    "unknown parent": (["graph.x.parents=[thta]"], GraphError, "thta"),
    "misspelt simulator kwarg": (
        ["graph.x.simulator.sigmaa=0.1"],
        ConfigError,
        "did you mean 'sigma'",
    ),
}


@pytest.mark.parametrize("case", list(K17_CASES))
def test_k17_bad_config_is_caught_before_ray_starts(case, tmp_path, monkeypatch):
    overrides, error, pattern = K17_CASES[case]

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was about to start")

    monkeypatch.setattr(kestrel.session._session, "ray_for_run", no_ray)
    with pytest.raises(error, match=pattern):
        launch(example("01_minimal"), tmp_path / "run", overrides=overrides, progress=False)
    assert not (tmp_path / "run" / "config.yml").exists()


def test_k17_embedding_null_is_the_identity(tmp_path, no_leaked_actors):
    config = example("01_minimal")
    result = launch(
        config,
        tmp_path / "run",
        overrides=tiny(config) + ["graph.z.estimator.embedding=null"],
        seed=15,
        progress=False,
    )
    assert result.status == "completed"


def test_k16_a_node_that_cannot_start_names_the_node_and_the_original_error(
    tmp_path, no_leaked_actors
):
    with pytest.raises(
        SimulatorError, match=r"node 'x'.*TypeError: BadInit\(\) got a sigma it cannot use"
    ):
        launch(toy(tmp_path, x=f"{MODELS}.BadInit"), tmp_path / "run", seed=16, progress=False)


def test_k16_more_gpus_than_the_cluster_has_fails_before_any_actor(tmp_path, no_leaked_actors):
    cfg = toy(tmp_path)
    cfg["graph"]["x"]["ray"] = {"num_gpus": 2}
    with pytest.raises(ConfigError, match="node 'x' requests 2 GPUs; the cluster has 0"):
        launch(cfg, tmp_path / "run", seed=17, progress=False)
