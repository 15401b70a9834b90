"""``on_error: skip`` in every command that simulates: ``kestrel sample prior|ppd`` (in this
process and on Ray), ``kestrel check calibration`` (both sources), the launch's own PPD (K34)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kestrel import launch, sample_run
from kestrel.check._calibrate import check_calibration
from kestrel.cli import main

from .test_blame import fragile


@pytest.fixture(scope="module")
def trained(tmp_path_factory, ray_session):
    """θ ~ U(0, 2.22) × U(0, 1), x raises for θ₀ > 2 (about 10 % of prior draws), skipped."""
    tmp = tmp_path_factory.mktemp("k34")
    cfg = fragile(tmp, on_error="skip")
    cfg["graph"]["theta"]["estimator"]["amortized"] = True  # prior draws: some raise
    cfg["sample"] = {"posterior": {"n": 5}, "ppd": {"n": 300}}
    result = launch(cfg, tmp / "run", seed=1, progress=False)
    assert result.status == "completed" and result.errors["x"] > 0
    return tmp / "run", result


def _check(result, n):
    with np.load(result.path) as data:
        rows = len(data["x"])
        assert np.isfinite(data["x"]).all() and (data["theta"][:, 0] <= 2.0).all()
    assert 0 < result.skipped.errors["x"] == n - rows
    assert "theta[0] > 2.0" in result.skipped.error["x"][0]
    return rows


def test_k34_on_error_skip_in_every_command(trained, no_leaked_actors):
    run, launched = trained
    with np.load(launched.samples["ppd"]) as data:  # the launch's PPD: dropped too
        assert len(data["x"]) <= 300 and np.isfinite(data["x"]).all()
    edge = np.array([2.1, 0.5])  # a posterior across θ₀ = 2
    for mode, obs in (("prior", None), ("ppd", edge)):
        here = sample_run(run, mode, n=400, seed=4, observation=obs)
        on_ray = sample_run(run, mode, n=400, seed=4, observation=obs, ray=True)
        assert not here.ray and on_ray.ray
        assert _check(here, 400) == _check(on_ray, 400)  # the same draws, the same rows
    for source, ray in (("prior", False), ("proposal", True)):
        result = check_calibration(
            run, n=120, samples=20, source=source, seed=2, ray=ray, image=False
        )
        report = json.loads(Path(result.path).read_text())
        assert report["skipped"] == result.skipped.errors and report["skipped"]["x"] > 0
        assert report["n"] == 120 - report["skipped"]["x"] - report["dropped"]


def test_k34_sample_and_check_commands_report_the_skipped_samples(trained, capsys):
    run, _ = trained
    np.save(run.parent / "edge.npy", np.array([2.1, 0.5]))
    argv = [
        "sample",
        "ppd",
        "-o",
        str(run),
        "-n",
        "300",
        "--observation",
        str(run.parent / "edge.npy"),
    ]
    assert main([*argv, "--seed", "6"]) == 0
    out, err = capsys.readouterr()
    assert "kestrel sample: " in out and "ppd samples" in out
    assert "samples whose simulation raised (on_error: skip): {'x': " in out
    assert "of 300 samples" in out and "note:" not in out
    assert "kestrel sample: node x: skipping samples whose simulation raises" in err
    assert "ValueError: theta[0] > 2.0" in err and "kestrel_ray" not in err
    argv = ["check", "calibration", "-o", str(run), "-n", "60", "--samples", "20", "--from"]
    assert main([*argv, "prior", "--seed", "3", "--no-image"]) == 0
    out, err = capsys.readouterr()
    assert "samples whose simulation raised (on_error: skip): {'x': " in out
    assert "kestrel check calibration: node x: skipping samples" in err
