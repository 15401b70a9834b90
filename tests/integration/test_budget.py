"""Issue 14: a simulation budget spent exactly, rounds paced by epochs, deterministic launches.

In-process launches on the session's Ray (tiny buffers, a Gaussian estimator).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kestrel import launch
from kestrel_core.store._buffer_file import read_buffer_file

from .test_launch import MODELS, toy


def status(run) -> dict:
    return json.loads((run / "status.json").read_text())


def driver_log(run) -> str:
    return (run / "graph" / "driver" / "output.log").read_text()


def budget_config(
    tmp_path, simulations, *, max_epochs=500, x=f"{MODELS}.SometimesNaN", batch_size=128, **buffer
):
    """80 initial simulations (64 + 16), rounds of 16; an estimator that would early-stop after
    one epoch without improvement."""
    cfg = toy(
        tmp_path,
        x=x,
        estimator={
            "_target_": "kestrel_torch.GaussianPosterior",
            "max_epochs": max_epochs,
            "early_stop_patience": 1,
            "batch_size": batch_size,
        },
        **{"simulate_interval": 0.0, **buffer},
    )
    cfg["budget"] = {"simulations": simulations}
    return cfg


def test_the_budget_is_spent_exactly_counting_invalid_rows_and_resumes(tmp_path, no_leaked_actors):
    run = tmp_path / "run"
    result = launch(budget_config(tmp_path, 200), run, seed=5, progress=False)

    assert result.status == "completed"
    budget = status(run)["budget"]
    assert budget["total"] == 200 and budget["used"] == 200 and budget["left"] == 0
    nonfinite = sum(result.nonfinite.values())
    assert nonfinite > 0  # SometimesNaN: ~20 % invalid rows, counted against the budget
    assert budget["invalid"] == nonfinite
    assert result.simulated + nonfinite == 200  # valid rows kept + invalid rows = every row
    snapshot = read_buffer_file(str(run / "buffer" / "snapshots"))
    assert snapshot is not None and snapshot.next_id == 200  # the store took exactly 200 rows
    assert "the simulation budget of 200 is spent" in driver_log(run)

    # the budget is the run's: a resume with a larger budget uses only the difference
    again = launch(None, run, overrides=["budget.simulations=250"], progress=False)
    budget = status(run)["budget"]
    assert again.status == "completed"
    assert budget["used"] == 250 and budget["total"] == 250
    assert read_buffer_file(str(run / "buffer" / "snapshots")).next_id == 250
    # a resume with the budget spent simulates nothing more
    launch(None, run, progress=False)
    assert status(run)["budget"]["used"] == 250
    assert read_buffer_file(str(run / "buffer" / "snapshots")).next_id == 250


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "free"])
def test_every_budgeted_row_reaches_training_whatever_max_epochs(
    deterministic, tmp_path, no_leaked_actors
):
    """Issue 31 item 4: 80 initial rows and 6 rounds of 16, max_epochs 2, a buffer that keeps
    every row. Training goes on past max_epochs while the rounds come and trains on the last
    round before it ends; nothing is drawn after training."""
    run = tmp_path / "run"
    cfg = budget_config(
        tmp_path, 176, max_epochs=2, x=f"{MODELS}.Noise", epochs_per_round=1, max_samples=512
    )
    cfg["deterministic"] = deterministic
    result = launch(cfg, run, seed=6, progress=False)
    assert result.status == "completed" and result.epochs["z"] >= 2
    assert status(run)["budget"]["used"] == 176 and result.simulated == 176
    assert "training ended with" not in driver_log(run)  # nothing drawn after training
    rows = (run / "graph" / "z" / "metrics.csv").read_text().splitlines()
    seen = int(dict(zip(rows[0].split(","), rows[-1].split(",")))["samples_seen"])
    # every row was in training but the newest 16, the validation set (a new round's rows
    # start as validation rows and move the oldest validation rows into training)
    assert seen + 16 == 176
    if deterministic:
        # round k is drawn at the end of epoch k and taken in at the end of epoch k + 1; the
        # last (6) marks the budget spent, and one more epoch trains on it: 8 epochs, as
        # the INFO line says (a free launch also draws from the prior before its first
        # epoch ended, so how long it trains past max_epochs depends on the machine's speed)
        assert result.epochs["z"] == 8
        assert (
            "node z: max_epochs 2 reached with the budget's rounds still to come"
            in (run / "graph" / "z" / "output.log").read_text()
        )


def test_a_full_buffer_ends_the_rounds_that_training_waits_for(tmp_path, no_leaked_actors):
    """simulate_when_full: false: a budget larger than what fits does not hold training
    forever; the round that finds the buffer full ends the rounds, and training with them."""
    run = tmp_path / "run"
    cfg = budget_config(
        tmp_path,
        10_000,
        max_epochs=2,
        x=f"{MODELS}.Noise",
        epochs_per_round=1,
        max_samples=96,
        simulate_when_full=False,
    )
    result = launch(cfg, run, seed=7, progress=False)
    assert result.status == "completed" and result.epochs["z"] >= 2
    assert status(run)["budget"]["used"] == result.simulated < 10_000
    assert "the buffer is full (simulate_when_full: false)" in driver_log(run)


def test_budget_left_when_training_ends_is_drawn_from_the_final_proposal(
    tmp_path, no_leaked_actors
):
    run = tmp_path / "run"
    cfg = budget_config(tmp_path, 176, max_epochs=2, x=f"{MODELS}.Noise", epochs_per_round=1)
    # budget.stop_early: true lets max_epochs end training with budget left (without it,
    # training goes on while the budget's rounds come: the test above)
    cfg["budget"]["stop_early"] = True
    result = launch(cfg, run, seed=6, progress=False)
    assert result.status == "completed" and result.epochs == {"z": 2}
    assert status(run)["budget"]["used"] == 176 and result.simulated == 176
    assert "training ended with" in driver_log(run)


def test_a_budget_smaller_than_the_initial_simulation_fails_at_start(tmp_path, no_leaked_actors):
    from kestrel_core import ConfigError

    with pytest.raises(ConfigError, match=r"budget\.simulations: 50 .* = 80"):
        launch(budget_config(tmp_path, 50), tmp_path / "run", seed=1, progress=False)


def _files(run):
    """The arrays a launch leaves: the buffer, the weights, the posterior samples."""
    snapshot = read_buffer_file(str(run / "buffer" / "snapshots"))
    weights = (run / "graph" / "z" / "estimator.pt").read_bytes()
    samples = sorted((run / "samples" / "posterior").rglob("[0-9]*.npz"))
    return snapshot, weights, [p.read_bytes() for p in samples]


def test_a_seeded_launch_is_bit_identical_under_cpu_load(tmp_path, no_leaked_actors):
    """Deterministic mode (deterministic: true and a seed): the same buffers, weights and posterior samples,
    with and without another process loading the CPU. The simulator is slower than an epoch,
    so without the deterministic schedule training runs ahead of the rounds by however much
    the machine allows (measured: the files then differ)."""
    cfg = budget_config(
        tmp_path,
        176,
        max_epochs=30,
        batch_size=8,  # 10 steps an epoch: rounds and epochs of similar length
        x=f"{MODELS}.SlowNoise",
        epochs_per_round=2,
        max_samples=96,  # the buffer rotates: eviction must happen at the same points
    )
    cfg["sample"]["posterior"]["n"] = 50
    cfg["deterministic"] = True
    first = launch(cfg, tmp_path / "a", seed=11, progress=False)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        second = launch(cfg, tmp_path / "b", seed=11, progress=False)
    finally:
        burner.kill()
        burner.wait()
    assert first.status == second.status == "completed"
    assert status(tmp_path / "a")["deterministic"] is True
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a[0].arrays.keys() == b[0].arrays.keys()
    for key in a[0].arrays:
        np.testing.assert_array_equal(a[0].arrays[key], b[0].arrays[key], err_msg=key)
    np.testing.assert_array_equal(a[0].ids, b[0].ids)
    np.testing.assert_array_equal(a[0].statuses, b[0].statuses)
    assert a[1] == b[1], "estimator.pt differs"
    assert a[2] and a[2] == b[2], "posterior samples differ"
    assert first.epochs == second.epochs
