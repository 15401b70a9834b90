"""Posterior accuracy on the examples with known answers (DESIGN.md §4), within CI's budget.

* 05 — linear regression, on a two-node local cluster whose second raylet alone offers the
  custom resource the simulator nodes ask for (issue 5, item 9): mean error ≤ 0.1 posterior σ
  and σ ratio within 0.9–1.1 in all 10 dimensions.
* 04 — float64 precision: σ ratios within 0.8–1.25.
* 01 — the proposals zoom in 577-fold: after 120 s (≈ 90 epochs unloaded) posterior means within
  0.25 σ of x_o and σ ratios within 0.7–1.3 (measured 2026-12-01, seeds 1, 2: means ≤ 0.11 σ,
  ratios 0.81–1.02). The whole 300-epoch run and the README's 0.1 σ claim:
  ``KESTREL_FULL_ACCURACY=1 hatch test tests/integration/test_accuracy.py -- -k test_01``
  (≈ 4 min).
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

#: per example: overrides and a time cap (seconds; the run then stops gracefully and samples, as
#: on Ctrl-C) that keep CI within its budget; the examples' own configs are what users run
BUDGET = {
    "05_linear_regression": ([], 300),
    "04_gaussian": ([], 150),
    "01_minimal": ([], 120),
}
#: KESTREL_FULL_ACCURACY=1: example 01's whole 300-epoch run (≈ 240 s) against the 0.1 σ claim
FULL = os.environ.get("KESTREL_FULL_ACCURACY", "") not in ("", "0")


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
@pytest.mark.timeout(600)
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
    overrides, cap = BUDGET["05_linear_regression"]
    done = run_kestrel(
        "launch",
        "-c",
        example("05_linear_regression"),
        "-o",
        run,
        "--address",
        address,
        "--seed",
        "5",
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
    assert status["status"] in ("completed", "timeout")  # timeout: CI's time cap
    # the simulator nodes ran on the second raylet, the only one offering "sim"
    assert status["placement"]["mu"] == [worker] and status["placement"]["x"] == [worker]
    assert status["cluster"][worker]["sim"] == 2

    theta = posterior(next((run / "samples" / "posterior").glob("*/000000.npz")))["theta"]
    mean, std = analytic_05()
    err = (theta.mean(0) - mean) / std
    ratio = theta.std(0, ddof=1) / std
    assert np.all(np.abs(err) <= 0.1), f"mean errors in posterior σ: {np.round(err, 3)}"
    assert np.all((ratio >= 0.9) & (ratio <= 1.1)), f"σ ratios: {np.round(ratio, 3)}"


@pytest.mark.slow
def test_04_posterior_widths(tmp_path, no_leaked_actors):
    overrides, cap = BUDGET["04_gaussian"]
    result = launch(
        example("04_gaussian"),
        tmp_path / "run",
        overrides=overrides,
        seed=4,
        timeout=cap,
        progress=False,
    )
    z = posterior(result.samples["posterior"])["z"]
    with np.load(EXAMPLES / "04_gaussian" / "data" / "obs.npz") as obs:
        mean, std = obs["posterior_mean"], obs["posterior_std"]
    ratio = z.std(0, ddof=1) / std
    assert np.all((ratio >= 0.8) & (ratio <= 1.25)), f"σ ratios: {ratio}"
    assert np.all(np.abs(z.mean(0) - mean) <= 0.5 * std), (
        f"mean errors in σ: {(z.mean(0) - mean) / std}"
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_01_posterior_means(tmp_path, no_leaked_actors):
    overrides, cap = BUDGET["01_minimal"]
    result = launch(
        example("01_minimal"),
        tmp_path / "run",
        overrides=overrides,
        seed=1,
        timeout=None if FULL else cap,
        progress=False,
    )
    z = posterior(result.samples["posterior"])["z"]
    with np.load(EXAMPLES / "01_minimal" / "data" / "obs.npz") as obs:
        x_o = obs["x"]
    err = (z.mean(0) - x_o) / 0.1
    ratio = z.std(0, ddof=1) / 0.1
    bound, widths = (0.1, (0.9, 1.1)) if FULL else (0.25, (0.7, 1.3))
    assert np.all(np.abs(err) <= bound), f"mean errors in posterior σ: {np.round(err, 3)}"
    assert np.all((ratio >= widths[0]) & (ratio <= widths[1])), f"σ ratios: {np.round(ratio, 3)}"
