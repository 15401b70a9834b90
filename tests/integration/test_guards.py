"""Issue 10 items 5–6 end to end through ``kestrel sample``: what the guards find is warned about
and recorded beside the sample file and in ``samples/observation_checks.json`` (never in the
launch's ``status.json``, K38); a run trained with proposals warns
at another observation, an amortized one does not; a non-finite ``--observation`` is refused.

The run directories are made without a launch (no Ray): the config written as a launch writes
it, the estimator trained here on an in-memory store (case K23's simulator) and saved where a
launch saves it.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from kestrel import RunDir, sample_run
from kestrel.cli import main
from kestrel.sample._guards import STATUS_KEY, read_checks, trains_with_proposals
from kestrel_core import ConfigError, EstimatorContext, InMemoryStore, Product, load_config
from kestrel_core.graph._observe import ObservationWarning
from kestrel_ray.graph._arrays import observation_columns

PRIOR = Product([["uniform", -1.0, 1.0]] * 2)
X_OWN = np.array([0.3, -0.2, 0.5])  # the third feature is always exactly 0 in training (K23)


class ConstantThird:
    """Case K23: ``[θ1 + 0.01 ε, θ2 + 0.01 ε, 0.0]``."""

    def simulate_batch(self, n, theta, rng=None):
        noisy = theta + 0.01 * rng.standard_normal(theta.shape)
        return np.concatenate([noisy, np.zeros((n, 1))], axis=1)


def k23_config(tmp: Path, **estimator) -> dict:
    np.save(tmp / "obs.npy", X_OWN)
    return {
        "buffer": {"min_samples": 64, "max_samples": 128, "validation_samples": 16},
        "graph": {
            "theta": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -1.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", **estimator},
            },
            "x": {
                "simulator": {"_target_": f"{__name__}.ConstantThird"},
                "parents": ["theta"],
                "observed": str(tmp / "obs.npy"),
            },
        },
        "sample": {"posterior": {"n": 400}},
    }


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> bytes:
    """A Gaussian estimator trained 3 epochs on K23 data, as checkpoint bytes."""
    rng = np.random.default_rng(0)
    theta = PRIOR.sample(1024, rng)
    x = ConstantThird().simulate_batch(1024, theta, rng)
    store = InMemoryStore(min_samples=0, max_samples=1024, validation_samples=128)
    store.append(
        {"theta.value": theta, "theta.log_prob": PRIOR.log_prob(theta), "x.value": x}, 1024
    )
    cfg = load_config(k23_config(tmp_path_factory.mktemp("k23")), check_targets=("estimator",))
    est = cfg.graph.nodes["theta"].estimator.build()
    est.setup(EstimatorContext(node="theta", prior=PRIOR, evidence=("x",), seed=1))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small network: a second thread costs more than it gains
    try:
        asyncio.run(est.train(store.view()))
    finally:
        torch.set_num_threads(threads)
    return est.save_bytes()


def make_run(tmp: Path, weights: bytes, **estimator) -> Path:
    """A run directory as a launch leaves it (config, observations, saved weights)."""
    config = load_config(k23_config(tmp, max_epochs=3, **estimator))
    run = RunDir(tmp / "run", config)
    run.makedirs()
    run.write_config(config)
    node = Path(run.node_dir("theta"))
    node.mkdir(parents=True, exist_ok=True)
    (node / "estimator.pt").write_bytes(weights)
    run.mark_saved("theta", {})
    return tmp / "run"


def test_k23_findings_are_warned_and_recorded_with_the_samples(tmp_path, weights):
    root = make_run(tmp_path, weights)
    with pytest.warns(
        ObservationWarning, match=r"node 'theta': 1 feature is constant.*x\[2\]"
    ) as w:
        result = sample_run(root, "posterior", seed=1)
    assert w[0].filename == __file__  # points at the sampling call
    values = np.load(result.path)["theta"]
    assert np.all(np.isfinite(values)) and np.all(values.std(0) > 0.003)  # not on a corner
    meta = json.loads(Path(result.path).with_suffix(".json").read_text())
    (finding,) = meta[STATUS_KEY]
    assert meta["observation"] == result.observation and meta["mode"] == "posterior"
    assert finding["kind"] == "constant" and finding["feature"] == 2 and finding["differs"]
    status = read_checks(RunDir(root))[f"posterior/{result.observation}"]
    assert status["findings"] == [finding] and status["file"].endswith("000000.npz")
    assert not (Path(root) / "status.json").exists()  # the launch's file: sampling never writes it


def test_findings_on_ray_come_back_with_the_draws(tmp_path, weights, no_leaked_actors):
    # the estimator warns in its node actor; its findings return with the samples it drew
    # (the trace's findings), are recorded and warned here, as for draws in this process
    root = make_run(tmp_path, weights)
    with pytest.warns(ObservationWarning, match=r"node 'theta'.*constant x\[2\]"):
        result = sample_run(root, "posterior", n=10, seed=1, ray=True)
    assert result.ray
    (finding,) = json.loads(Path(result.path).with_suffix(".json").read_text())[STATUS_KEY]
    assert finding["kind"] == "constant" and finding["feature"] == 2


def test_item6_another_observation_warns_for_a_run_trained_with_proposals(tmp_path, weights):
    root = make_run(tmp_path, weights)
    np.save(tmp_path / "other.npy", np.array([-0.5, 0.6, 0.5]))
    with pytest.warns(ObservationWarning) as caught:
        result = sample_run(root, "posterior", n=50, observation=str(tmp_path / "other.npy"))
    other = [w.message for w in caught if "another observation" in str(w.message)]
    assert len(other) == 1 and "node 'theta': trained with proposals" in str(other[0])
    assert "amortized: true (graph.theta.estimator.amortized" in str(other[0])
    kinds = {
        f["kind"]
        for f in json.loads(Path(result.path).with_suffix(".json").read_text())[STATUS_KEY]
    }
    assert kinds == {"other_observation", "constant"}


def test_item6_an_amortized_run_does_not_warn_for_other_observations(tmp_path, weights):
    root = make_run(tmp_path, weights, amortized=True)
    np.save(tmp_path / "other.npy", np.array([-0.5, 0.6, 0.0]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sample_run(root, "posterior", n=50, observation=str(tmp_path / "other.npy"))
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "another observation" in m], messages
    spec = RunDir(root).load_config(check_targets=()).graph.nodes["theta"].estimator
    assert not trains_with_proposals(spec)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_k24_non_finite_observation_at_sample_time_is_refused(tmp_path, weights, bad, capsys):
    root = make_run(tmp_path, weights)
    obs = np.array([0.4, float(bad), 0.0])
    np.save(tmp_path / "bad.npy", obs)
    with pytest.raises(
        ConfigError, match=rf"node 'x': observation .*bad.npy holds {bad} at index 1"
    ):
        sample_run(root, "posterior", n=5, observation=str(tmp_path / "bad.npy"))
    with pytest.raises(ConfigError, match=rf"observation holds {bad} at index 1"):
        sample_run(root, "posterior", n=5, observation=obs)  # an in-memory array
    assert main(
        ["sample", "posterior", "-o", str(root), "--observation", str(tmp_path / "bad.npy")]
    )
    assert f"holds {bad} at index 1" in capsys.readouterr().err
    graph = RunDir(root).load_config(check_targets=()).graph
    with pytest.raises(ConfigError, match=rf"node 'x': observation holds {bad} at index 1"):
        observation_columns(graph, {"x": obs})  # DeployedGraph.sample_posterior's door
    assert not list((root / "samples").rglob("*.npz"))  # nothing drawn


def test_findings_are_recorded_before_the_warnings_are_issued(tmp_path, weights):
    root = make_run(tmp_path, weights)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObservationWarning)  # a caller that makes them errors
        with pytest.raises(ObservationWarning, match="constant in the training data") as err:
            sample_run(root, "posterior", n=10, seed=1)
    assert err.value.findings[0]["feature"] == 2
    written = list((root / "samples" / "posterior").glob("*/000000.*"))
    assert sorted(p.suffix for p in written) == [".json", ".npz"]
    # the warning registry does not hide a second call's findings
    with pytest.warns(ObservationWarning, match="constant in the training data"):
        again = sample_run(root, "posterior", n=10, seed=2)
    assert Path(again.path).with_suffix(".json").is_file()


def test_findings_reported_by_estimators_on_ray_become_warnings():
    from kestrel.sample._guards import status_findings

    far = {"node": "theta", "kind": "far", "label": "x[1]", "z": 12.5, "feature": 1}

    class Deployed:  # the status a DeployedGraph returns (one replica, then two)
        def status(self):
            return {"theta": {"estimator": {STATUS_KEY: [far]}}, "psi": [{}, {"estimator": {}}]}

    (note,) = status_findings(Deployed(), ["theta", "psi"])
    assert (
        note.findings == [far]
        and "node 'theta'" in str(note)
        and "far x[1] (z = +12.5)" in str(note)
    )

    class Gone:
        def status(self):
            raise TimeoutError

    assert status_findings(Gone(), ["theta"]) == []


FAR = np.array([50.0, -0.2, 0.5])  # x[0] far outside the training data


def _kinds(path: str) -> set[tuple[str, int | None]]:
    meta = json.loads(Path(path).with_suffix(".json").read_text())
    return {(f["kind"], f.get("row")) for f in meta[STATUS_KEY]}


def test_batched_observations_are_checked_and_recorded_per_row(tmp_path, weights, monkeypatch):
    # 3 observations (the run's own, another, one far outside), 5 draws each, in graph calls
    # of 7 rows: the guards number the observations of each call, the file by observation
    monkeypatch.setattr("kestrel.sample._batch.CALL_ROWS", 7)
    root = make_run(tmp_path, weights)
    np.save(tmp_path / "batch.npy", np.array([X_OWN, [-0.5, 0.6, 0.5], FAR]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sample_run(root, "posterior", n=5, observation=str(tmp_path / "batch.npy"))
    messages = [str(w.message) for w in caught if issubclass(w.category, ObservationWarning)]
    other = [m for m in messages if "trained with proposals" in m]
    assert len(other) == 1 and "other observations (observation rows 1, 2 of 3;" in other[0]
    assert [m for m in messages if "observation row 2: the observation lies far" in m]
    assert [m for m in messages if "observation rows 0, 1, 2: 1 feature is constant" in m]
    assert not [m for m in messages if "row 0: the observation lies far" in m]
    kinds = _kinds(result.path)
    assert {k for k in kinds if k[0] != "edge"} == {
        ("other_observation", 1),
        ("other_observation", 2),
        ("far", 2),
        ("constant", 0),
        ("constant", 1),
        ("constant", 2),
    }
    status = read_checks(RunDir(root))[f"posterior/{result.observation}"]
    assert status["file"].endswith("000000.npz") and len(status["findings"]) >= 6


def test_equal_batched_observations_in_several_calls_are_each_recorded(
    tmp_path, weights, monkeypatch
):
    monkeypatch.setattr("kestrel.sample._batch.CALL_ROWS", 7)
    root = make_run(tmp_path, weights)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sample_run(root, "posterior", n=5, observation=np.tile(FAR, (4, 1)))
    # the estimator warns once per message: the equal observations of later calls come from
    # its status (what its latest draw found), so every row is named and recorded
    far = [str(w.message) for w in caught if "far" in str(w.message)]
    assert far[0].startswith("node 'theta': observation rows 0, 1: the observation lies far")
    assert any("far x[0] (observation rows 2, 3)" in t for t in far[1:]), far
    assert {row for kind, row in _kinds(result.path) if kind == "far"} == {0, 1, 2, 3}


def test_rows_reported_by_estimators_on_ray_are_numbered_by_observation():
    from kestrel.sample._guards import merge_rows, renumber, status_findings

    far = {"node": "theta", "kind": "far", "label": "x[0]", "z": 12.5, "feature": 0, "row": 1}

    class Deployed:
        def status(self):
            return {"theta": {"estimator": {STATUS_KEY: [far]}}}

    (note,) = status_findings(Deployed(), ["theta"])
    moved = renumber(note, [[3], [4, 5]])  # run 1 of this call: observations 4 and 5
    assert "(observation rows 4, 5)" in str(moved) and "row 1)" not in str(moved)
    assert [f["row"] for f in moved.findings] == [4, 5]
    one = ObservationWarning("node 'theta': observation row 0: far", [{"kind": "far", "row": 0}])
    two = ObservationWarning("node 'theta': observation row 1: far", [{"kind": "far", "row": 1}])
    (joined,) = merge_rows([renumber(one, [[7]]), renumber(two, [[2], [8]])])
    assert str(joined) == "node 'theta': observation rows 7, 8: far"
    assert [f["row"] for f in joined.findings] == [7, 8]
