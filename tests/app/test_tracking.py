"""Experiment tracking without Ray (issue 33 item 6): the config's ``tracking`` section checked
at load, a missing package refused before anything is written, the MLflow tracker on a local
file store, and :class:`LaunchTracking` (params once, the polls' scalars, a failing tracker
dropped, every tracker closed whichever way the launch ends)."""

from __future__ import annotations

import json
import logging
import sys

import numpy as np
import pytest
import yaml

from kestrel.cli import main
from kestrel.controller._budget import Budget
from kestrel.controller._states import Phase
from kestrel.report._nodelog import metric_scalars
from kestrel.report._progress import ProgressState
from kestrel.tracking import TRACKING_FILE, LaunchTracking, MLflowTracker, check_tracking
from kestrel_core import ConfigError, load_config

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["uniform", 0.0, 1.0]] * 2}


def config(tmp_path, tracking) -> dict:
    """z ~ U(0, 1)², x = z + noise observed at [0.4, 0.6], with a ``tracking`` section."""
    np.save(tmp_path / "obs.npy", np.array([0.4, 0.6]))
    return {
        "buffer": {"min_samples": 8, "max_samples": 16, "validation_samples": 4},
        "graph": {
            "z": {
                "simulator": PRIOR,
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 1},
            },
            "x": {
                "simulator": "kestrel_core.testing.models.Noise",
                "parents": ["z"],
                "observed": str(tmp_path / "obs.npy"),
            },
        },
        "tracking": tracking,
    }


# -- the config ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tracking, message",
    [
        (
            {"wandb": {"project": "p"}},
            "tracking.wandb: unknown tracking kind 'wandb'; known kinds: tensorboard, mlflow",
        ),
        ({"tensorbord": "tb"}, "tracking.tensorbord: unknown tracking kind 'tensorbord' (did you"),
        ("tensorboard", "tracking: expected a mapping of tracker kinds (tensorboard, mlflow)"),
        ({"tensorboard": 3}, "tracking.tensorboard: expected the folder of the event files"),
        ({"mlflow": {"uri": "x"}}, "tracking.mlflow.uri: unknown key 'uri'"),
        ({"mlflow": {"experiment": 7}}, "tracking.mlflow.experiment: expected a name, found 7"),
    ],
)
def test_a_wrong_tracking_section_is_a_config_error_naming_the_key(tmp_path, tracking, message):
    with pytest.raises(ConfigError) as err:
        load_config(config(tmp_path, tracking))
    assert message in str(err.value)


def test_tracking_overrides_are_checked_too(tmp_path):
    cfg = config(tmp_path, None)
    with pytest.raises(ConfigError, match=r"tracking\.mlfow: unknown tracking kind 'mlfow' \(did"):
        load_config(cfg, overrides=["tracking.mlfow.experiment=e"])
    with pytest.raises(ConfigError, match="tracking.tensorboard has no sub-keys"):
        load_config(cfg, overrides=["tracking.tensorboard.dir=tb"])
    loaded = load_config(cfg, overrides=["tracking.tensorboard=tb", "tracking.mlflow.experiment=e"])
    assert loaded.tracking == {"tensorboard": "tb", "mlflow": {"experiment": "e"}}
    assert load_config(cfg).tracking == {}


def test_kestrel_launch_names_the_unknown_tracking_kind(tmp_path, capsys):
    (tmp_path / "config.yml").write_text(yaml.safe_dump(config(tmp_path, {"wandb": {}})))
    status = main(["launch", "-c", str(tmp_path / "config.yml"), "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status != 0
    assert "tracking.wandb: unknown tracking kind 'wandb'; known kinds: tensorboard, mlflow" in err
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_missing_tracker_package_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    (tmp_path / "config.yml").write_text(yaml.safe_dump(config(tmp_path, {"tensorboard": "tb"})))
    status = main(["launch", "-c", str(tmp_path / "config.yml"), "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 1
    assert "tracking.tensorboard: TensorBoard tracking needs the tensorboard package" in err
    assert "pip install 'kestrel[tracking]'" in err
    run = tmp_path / "run"
    assert not (run / "run.json").exists() and not (run / "config.yml").exists()
    assert not (run / "tb").exists()


def test_check_tracking_passes_with_the_packages_installed():
    check_tracking({"tensorboard": "tb", "mlflow": None})
    check_tracking({})


# -- MLflow on a local file store ------------------------------------------------------------
def state(simulated: int, rate: float, budget: Budget) -> ProgressState:
    return ProgressState(
        1.0, Phase.TRAINING, simulated=simulated, rate=rate, budget=budget.as_status()
    )


def test_the_mlflow_tracker_logs_to_one_mlflow_run_a_resume_continues(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks a file store's opt-in
    root = tmp_path / "run"
    root.mkdir()
    cfg = load_config(config(tmp_path, {"mlflow": {"tracking_uri": "mlruns", "experiment": "e"}}))
    log = logging.getLogger("test.tracking")

    budget = Budget(total=100, used=40)
    with LaunchTracking(cfg, str(root), budget, log, launch=1, seed=3) as tracking:
        report = tracking.reporting(lambda s: None)
        report(state(40, 20.0, budget))
        report(state(40, 10.0, budget))  # no new simulation: not logged again
        tracking.log_scalars(
            metric_scalars("z", ["1", "1700000000.5", "2.5", "1.5", "1.5", "0.01", "8"]),
            1,
            1700000000.5,
        )
    run_id = json.loads((root / TRACKING_FILE).read_text())["mlflow"]["run_id"]

    budget.used = 100  # a resume: the same MLflow run, the steps continued
    cfg2 = load_config(
        config(tmp_path, {"mlflow": {"tracking_uri": "mlruns", "experiment": "e"}}),
        overrides=["graph.z.estimator.max_epochs=2"],
    )
    with pytest.raises(RuntimeError, match="boom"):
        with LaunchTracking(cfg2, str(root), budget, log, launch=2, seed=3) as tracking:
            tracking.reporting(lambda s: None)(state(60, 30.0, budget))
            tracking.log_scalars({"z/train_loss": 0.5}, 2)
            raise RuntimeError("boom")
    assert json.loads((root / TRACKING_FILE).read_text())["mlflow"]["run_id"] == run_id

    client = MlflowClient(tracking_uri=str(root / "mlruns"))
    run = client.get_run(run_id)
    assert run.info.run_name == "run" and run.info.status == "FAILED"
    assert client.get_experiment(run.info.experiment_id).name == "e"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "z/train_loss")] == [
        (1, 2.5),
        (2, 0.5),
    ]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "budget/used")] == [
        (40, 40.0),
        (100, 100.0),
    ]
    assert [m.value for m in client.get_metric_history(run_id, "simulation/rate")] == [20.0, 30.0]
    # the config once: the first launch's values stay (MLflow refuses to change a param)
    params = run.data.params
    assert params["graph.z.estimator.max_epochs"] == "1" and params["kestrel.seed"] == "3"
    assert params["tracking.mlflow.experiment"] == "e"
    assert params["graph.z.simulator.priors.0.0"] == "uniform"  # MLflow names: no brackets


# -- LaunchTracking with trackers of its own ---------------------------------------------------
class Recorder:
    def __init__(self):
        self.params: list[dict] = []
        self.scalars: list[tuple[dict, int]] = []
        self.closed: str | None = None

    def log_params(self, params):
        self.params.append(dict(params))

    def log_scalars(self, scalars, step, walltime=None):
        self.scalars.append((dict(scalars), step))

    def close(self, status="finished"):
        self.closed = status


class Broken(Recorder):
    def log_scalars(self, scalars, step, walltime=None):
        raise OSError("the tracking server went away")


def test_a_failing_tracker_is_said_once_and_dropped_the_others_go_on(tmp_path, caplog):
    cfg = load_config(config(tmp_path, None))
    good, bad = Recorder(), Broken()
    budget = Budget(total=None, used=5)
    log = logging.getLogger("test.tracking")
    with caplog.at_level(logging.WARNING, logger="test.tracking"):
        with LaunchTracking(
            cfg, str(tmp_path), budget, log, trackers={"bad": lambda: bad, "good": lambda: good}
        ) as tracking:
            tracking.log_scalars({"z/train_loss": 1.0}, 1)
            tracking.log_scalars({"z/train_loss": 0.5}, 2)
            tracking.reporting(lambda s: None)(state(5, 2.0, budget))
    assert [p["buffer.min_samples"] for p in (good.params + bad.params)] == [8, 8]
    # no budget set: the rate and this launch's count only, at the run's simulations used
    assert good.scalars == [
        ({"z/train_loss": 1.0}, 1),
        ({"z/train_loss": 0.5}, 2),
        ({"simulation/rate": 2.0, "simulation/simulated": 5}, 5),
    ]
    said = [r.getMessage() for r in caplog.records if "tracking: bad stopped" in r.getMessage()]
    assert said == [
        "tracking: bad stopped (OSError: the tracking server went away); the launch and its metrics.csv go on"
    ]
    assert good.closed == "finished" and bad.closed == "failed"


@pytest.mark.parametrize("error, status", [(RuntimeError, "failed"), (KeyboardInterrupt, "killed")])
def test_the_trackers_are_closed_when_the_launch_raises(tmp_path, error, status):
    cfg = load_config(config(tmp_path, None))
    rec = Recorder()
    tracking = LaunchTracking(
        cfg, str(tmp_path), Budget(), logging.getLogger("t"), trackers={"rec": lambda: rec}
    )
    with pytest.raises(error):
        with tracking:
            raise error()
    assert rec.closed == status


def test_the_last_poll_is_tracked_at_close(tmp_path):
    """A poll whose simulations were not logged yet (the last ones) is logged when it ends."""
    cfg = load_config(config(tmp_path, None))
    rec = Recorder()
    budget = Budget(total=50, used=0)
    tracking = LaunchTracking(
        cfg, str(tmp_path), budget, logging.getLogger("t"), trackers={"rec": lambda: rec}
    )
    with tracking:
        report = tracking.reporting(lambda s: None)
        report(state(0, 0.0, budget))  # nothing simulated yet: nothing tracked
        budget.used = 50
        report(state(50, 25.0, budget))
    assert rec.scalars == [
        (
            {
                "simulation/rate": 25.0,
                "simulation/simulated": 50,
                "budget/used": 50,
                "budget/total": 50,
                "budget/fraction": 1.0,
            },
            50,
        )
    ]


def test_the_mlflow_tracker_without_mlflow_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(
        Exception,
        match=r"tracking\.mlflow: MLflow tracking needs the mlflow package: pip install 'kestrel\[tracking\]'",
    ):
        MLflowTracker("file:/nowhere")


def test_the_mlflow_tracker_defaults_to_mlflows_own_experiment(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    store = f"file:{tmp_path / 'mlruns'}"
    tracker = MLflowTracker(store, None, run_name="r")
    tracker.close()
    client = MlflowClient(tracking_uri=store)
    run = client.get_run(tracker.run_id)
    assert client.get_experiment(run.info.experiment_id).name == "Default"
    assert run.info.status == "FINISHED"
