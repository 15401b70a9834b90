"""Experiment tracking of a launch (issue 33 item 6): ``tracking: {tensorboard: tb}`` writes
TensorBoard event files that hold every epoch of ``metrics.csv``, the simulation rate and the
budget; a resume appends to the same folder and continues the steps."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kestrel import launch

from .test_launch import toy

BUDGET = 112  # the initial 64 + 16, then two rounds of 16


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, ray_session):
    """A toy run with TensorBoard tracking: 4 epochs spending its budget (max_epochs 3, and one
    more on the budget's last round), then resumed to 5."""
    tmp = tmp_path_factory.mktemp("tracking")
    cfg = toy(tmp, estimator={"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 3})
    cfg["tracking"] = {"tensorboard": "tb"}
    cfg["budget"] = {"simulations": BUDGET}
    run = tmp / "run"
    # deterministic: a round after each epoch, however fast the epochs are (the budget spent)
    first = launch(cfg, run, seed=5, progress=False, auto_sample=False, deterministic=True)
    # round 2, the budget's last, enters at the end of epoch 3: one epoch more trains on it
    # (every budgeted simulation reaches training, issue 31 item 4)
    assert first.status == "completed" and first.epochs == {"z": 4}
    second = launch(
        None,
        run,
        overrides=["graph.z.estimator.max_epochs=5"],
        progress=False,
        auto_sample=False,
    )
    assert second.status == "completed" and second.epochs == {"z": 5}
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return run, acc


def metrics(run) -> dict[str, np.ndarray]:
    with open(run / "graph" / "z" / "metrics.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {key: np.array([float(row[key]) for row in rows]) for key in rows[0]}


def test_the_event_files_hold_every_epoch_of_metrics_csv(tracked):
    run, acc = tracked
    table = metrics(run)
    assert list(table["epoch"]) == [1, 2, 3, 4, 5]
    for column in ("train_loss", "val_loss", "best_val_loss", "lr", "samples_seen"):
        events = acc.Scalars(f"z/{column}")
        # one event per epoch, steps continued by the resume (not restarted at 0)
        assert [e.step for e in events] == [1, 2, 3, 4, 5], column
        # TensorBoard keeps 32-bit floats
        np.testing.assert_array_equal(
            np.array([e.value for e in events], dtype=np.float32),
            table[column].astype(np.float32),
            err_msg=column,
        )
    # each launch added its own event file to the one folder
    assert len(list((run / "tb").glob("events.out.tfevents.*"))) == 2


def test_the_rate_and_budget_are_tracked_at_the_simulations_used(tracked):
    run, acc = tracked
    status = json.loads((run / "status.json").read_text())
    assert status["budget"]["used"] == BUDGET
    used = acc.Scalars("budget/used")
    steps = [e.step for e in used]  # the step: the run's simulations used so far
    assert steps and steps == sorted(set(steps)) and steps[-1] == BUDGET
    assert [e.value for e in used] == [float(s) for s in steps]
    assert {e.value for e in acc.Scalars("budget/total")} == {float(BUDGET)}
    assert acc.Scalars("budget/fraction")[-1].value == 1.0
    rates = acc.Scalars("simulation/rate")
    assert [e.step for e in rates] == steps and all(e.value > 0 for e in rates)


def test_each_launch_records_the_config(tracked):
    run, acc = tracked
    texts = acc.Tensors("config/text_summary")
    assert [e.step for e in texts] == [1, 2]  # the launch numbers of run.json
    table = texts[-1].tensor_proto.string_val[0].decode()
    assert "| graph.z.estimator.max_epochs | 5 |" in table
    assert "| tracking.tensorboard | tb |" in table
