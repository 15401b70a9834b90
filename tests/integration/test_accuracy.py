"""Posterior accuracy on the examples with known answers (DESIGN.md §4), within CI's budget.

Every run is a deterministic launch (``deterministic=True``/``--deterministic``, a fixed seed,
rounds paced by epochs): it trains a fixed number of epochs on the same rows whatever the
machine's load, so it passes or fails the same way on a busy machine as on an idle one. It has
to end by its epochs (status ``completed``); the time cap of :data:`RUNS` is a safety net far
above the run's length, and a run it stops fails. Measured 2026-12-04 on the 2-core machine
(other test runs going on, load 3–6):

* 05 — linear regression, on a two-node local cluster whose second raylet alone offers the
  custom resource the simulator nodes ask for (issue 5, item 9): mean error ≤ 0.1 posterior σ
  and σ ratio within 0.9–1.1 in all 10 dimensions. The config's 80 epochs, seed 5: max mean
  error 0.033 σ, σ ratios 0.970–1.016 (53–75 s, twice the same numbers).
* 04 — float64 precision: σ ratios within 0.8–1.25 (and mean errors within 0.5 σ). 400 of the
  config's 1000 epochs, seed 4: σ ratios 0.952–1.106, mean errors ≤ 0.078 σ (69–72 s, twice
  the same numbers; the whole 1000 epochs, deterministic: 0.965–1.020, ≤ 0.050 σ, 182 s).
* 01 — the proposals zoom in 577-fold: 90 of the config's 300 epochs with a round of 200
  simulations after every epoch (the config's clock-paced rounds cannot be deterministic),
  seed 1: posterior means within 0.25 σ of x_o and σ ratios within 0.7–1.3; measured means
  ≤ 0.031 σ, σ ratios 0.997–1.193 (86–121 s, three times the same numbers, as on 2026-12-03).
  The whole 300-epoch run of the example's own config (its rounds paced by the clock, so not
  the same run under every load) against the README's 0.1 σ claim:
  ``KESTREL_FULL_ACCURACY=1 hatch test tests/integration/test_accuracy.py -- -m slow -k test_01``
  (≈ 5 min).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kestrel import launch

from .helpers import EXAMPLES, REPO, analytic_05, example, kestrel_env, run_kestrel

#: per example: overrides, seed and a time cap. Every run is a deterministic launch (rounds
#: paced by epochs, a seed): it trains the same epochs on the same rows whatever the machine's
#: load, and it has to end by its epochs (status "completed"). The cap (seconds; the run would
#: then stop gracefully, as on Ctrl-C, with status "timeout") is only a safety net for a machine
#: so slow that the test would otherwise hang; a run it stops fails the test.
RUNS = {
    # the config's own 80 epochs (early stopping after 20 without improvement)
    "05_linear_regression": ([], 5, 600),
    # 400 of the config's 1000 epochs: a deterministic launch draws a round after every epoch
    # and training waits for it, so the config's 1000 epochs (999 rounds) took 182 s where the
    # clock-paced launch of today takes 65 s (470 rounds); 400 epochs draw 399 rounds
    "04_gaussian": (["graph.z.estimator.max_epochs=400"], 4, 450),
    # 90 of the config's 300 epochs. The config paces its rounds by the clock (128 simulations
    # every 0.5 s, epochs_per_round: 0), which a deterministic launch refuses: CI draws a round
    # of 200 after every epoch instead
    "01_minimal": (
        [
            "graph.z.estimator.max_epochs=90",
            "buffer.epochs_per_round=1",
            "buffer.simulate_count=200",
        ],
        1,
        600,
    ),
}
#: KESTREL_FULL_ACCURACY=1: example 01's whole 300-epoch run, its own config (clock-paced
#: rounds, no cap), against the 0.1 σ claim
FULL = os.environ.get("KESTREL_FULL_ACCURACY", "") not in ("", "0")


def ended_by_epochs(status: str, epochs, wall_time: float, cap: float) -> None:
    """The run ended by its epochs, not by the safety cap (a capped run trained fewer epochs
    than the measured one and says nothing about the bounds)."""
    assert status == "completed", (
        f"the run ended {status!r} after {epochs} epochs in {wall_time:.0f} s, not by its "
        f"epochs: the {cap} s cap is a safety net that a run on a working machine never reaches"
    )


def posterior(path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture
def two_node_cluster():
    """A head (1 CPU) and a second raylet (1 CPU, ``{"sim": 2}``) in a subprocess.

    Yields ``(address, worker node id)``; the cluster's own processes are stopped afterwards.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.cluster"],
        cwd=str(REPO),
        env=kestrel_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    info = {}
    try:
        for line in proc.stdout:
            key, _, value = line.strip().partition(" ")
            info[key] = value
            if key == "WORKER":
                break
        assert "ADDRESS" in info and "WORKER" in info, f"the cluster did not start: {info}"
        yield info["ADDRESS"], info["WORKER"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_05_posterior_on_a_two_node_cluster(two_node_cluster, tmp_path):
    address, worker = two_node_cluster
    run = tmp_path / "run"
    sim = [
        "graph.mu.ray.resources.sim=1",
        "graph.x.ray.resources.sim=1",
        # both raylets of this in-process cluster see the driver's files: nothing to ship
        # (the shipping is tested on a real cluster in test_real_cluster.py)
        "ray.runtime_env.working_dir=null",
    ]
    overrides, seed, cap = RUNS["05_linear_regression"]
    done = run_kestrel(
        "launch",
        "-c",
        example("05_linear_regression"),
        "-o",
        run,
        "--address",
        address,
        "--seed",
        str(seed),
        "--deterministic",
        "--timeout",
        str(cap),
        *sim,
        *overrides,
        timeout=cap + 240,
        # Ray's in-process test cluster runs without authentication (a real one is tested
        # with tokens in test_real_cluster.py); say so, as Ray's docs ask of every process
        env=kestrel_env(RAY_AUTH_MODE="disabled"),
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    status = json.loads((run / "status.json").read_text())
    assert status["deterministic"] is True
    ended_by_epochs(status["status"], status["epochs"], status["wall_time"], cap)
    # the simulator nodes ran on the second raylet, the only one offering "sim"
    assert status["placement"]["mu"] == [worker] and status["placement"]["x"] == [worker]
    assert status["cluster"][worker]["sim"] == 2

    theta = posterior(next((run / "samples" / "posterior").glob("*/000000.npz")))["theta"]
    mean, std = analytic_05()
    err = (theta.mean(0) - mean) / std
    ratio = theta.std(0, ddof=1) / std
    print(
        f"05: {status['wall_time']:.0f} s, {status['epochs']} epochs, {status['simulated']} "
        f"simulations, mean errors / σ {np.round(err, 3)} (max {np.abs(err).max():.3f}), "
        f"σ ratios {np.round(ratio, 3)}"
    )
    assert np.all(np.abs(err) <= 0.1), f"mean errors in posterior σ: {np.round(err, 3)}"
    assert np.all((ratio >= 0.9) & (ratio <= 1.1)), f"σ ratios: {np.round(ratio, 3)}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_04_posterior_widths(tmp_path, no_leaked_actors):
    overrides, seed, cap = RUNS["04_gaussian"]
    result = launch(
        example("04_gaussian"),
        tmp_path / "run",
        overrides=overrides,
        seed=seed,
        timeout=cap,
        progress=False,
        deterministic=True,
    )
    ended_by_epochs(result.status, result.epochs, result.wall_time, cap)
    z = posterior(result.samples["posterior"])["z"]
    with np.load(EXAMPLES / "04_gaussian" / "data" / "obs.npz") as obs:
        mean, std = obs["posterior_mean"], obs["posterior_std"]
    err = (z.mean(0) - mean) / std
    ratio = z.std(0, ddof=1) / std
    print(
        f"04: {result.wall_time:.0f} s, {result.epochs} epochs, {result.simulated} simulations, "
        f"mean errors / σ {np.round(err, 3)}, σ ratios {np.round(ratio, 3)}"
    )
    assert np.all((ratio >= 0.8) & (ratio <= 1.25)), f"σ ratios: {ratio}"
    assert np.all(np.abs(err) <= 0.5), f"mean errors in σ: {err}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_01_posterior_means(tmp_path, no_leaked_actors):
    overrides, seed, cap = RUNS["01_minimal"]
    if FULL:  # the example's own config, as users run it (its rounds paced by the clock)
        overrides, cap = [], None
    result = launch(
        example("01_minimal"),
        tmp_path / "run",
        overrides=overrides,
        seed=seed,
        timeout=cap,
        progress=False,
        deterministic=not FULL,
    )
    ended_by_epochs(result.status, result.epochs, result.wall_time, cap)
    z = posterior(result.samples["posterior"])["z"]
    with np.load(EXAMPLES / "01_minimal" / "data" / "obs.npz") as obs:
        x_o = obs["x"]
    err = (z.mean(0) - x_o) / 0.1
    ratio = z.std(0, ddof=1) / 0.1
    print(
        f"01: {result.wall_time:.0f} s, {result.epochs} epochs, {result.simulated} simulations, "
        f"mean errors / σ {np.round(err, 3)}, σ ratios {np.round(ratio, 3)}"
    )
    bound, widths = (0.1, (0.9, 1.1)) if FULL else (0.25, (0.7, 1.3))
    assert np.all(np.abs(err) <= bound), f"mean errors in posterior σ: {np.round(err, 3)}"
    assert np.all((ratio >= widths[0]) & (ratio <= widths[1])), f"σ ratios: {np.round(ratio, 3)}"
