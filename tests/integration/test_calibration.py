"""Issue 10 items 1–2: posteriors for m observations in one call; ``kestrel check calibration``.

One toy run (z ~ U(0, 1)², x = z + N(0, 0.05²), a Gaussian estimator trained 2 epochs, launched
with ``--check``) serves every test: under-trained on purpose, so its posterior is too wide and
the check says so.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from kestrel import RunDir, sample_run
from kestrel.check._calibrate import check_calibration
from kestrel.cli import main
from kestrel.rundir._read import read_run_samples
from kestrel.rundir._samplefiles import observation_digest
from kestrel_core import ConfigError, ShapeError

from .test_launch import toy

BATCH = np.array([[0.4, 0.6], [0.1, 0.9], [0.8, 0.2]])


@pytest.fixture(scope="module")
def launched(tmp_path_factory, ray_session):
    """``kestrel launch … --check`` (in this process, on the session's Ray): run and output."""
    tmp = tmp_path_factory.mktemp("calibration")
    config = tmp / "config.yml"
    config.write_text(yaml.safe_dump(toy(tmp)))
    out = io.StringIO()
    args = ["-c", str(config), "-o", str(tmp / "run"), "--seed", "11", "--no-auto-sample"]
    with contextlib.redirect_stdout(out):
        status = main(["launch", *args, "--progress", "none", "--check"])
    assert status == 0, out.getvalue()
    return tmp / "run", out.getvalue()


@pytest.fixture
def trained(launched):
    return launched[0]


def test_launch_check_runs_the_calibration_check_after_training(launched):
    run, out = launched
    assert "kestrel check calibration: underconfident" in out, out
    report = json.loads((run / "checks" / "calibration.json").read_text())
    assert (report["n"], report["samples"], report["from"]) == (200, 1000, "proposal")
    assert report["verdict"] == "underconfident" and report["max_deviation"] > 0.1


def test_posterior_for_m_observations_in_one_call(trained, tmp_path):
    np.save(tmp_path / "three.npy", BATCH)
    single = sample_run(trained, "posterior", n=5, seed=1)
    result = sample_run(
        trained, "posterior", n=300, seed=2, observation=str(tmp_path / "three.npy")
    )
    assert (result.batch, result.shapes, result.ray) == (3, {"z": (2,)}, False)
    assert result.observation == observation_digest({"x": BATCH})
    with np.load(result.path) as f:
        z = f["z"]
    assert z.shape == (3, 300, 2)
    # each observation's draws follow it (in order), even from a 2-epoch estimator
    assert np.abs(z.mean(axis=1) - BATCH).max() < 0.15
    run = RunDir(trained)
    np.testing.assert_array_equal(run.sample_observation(result.path)["x"], BATCH)
    assert run.latest_sample_file("posterior") == single.path  # a batch is not plotted
    with pytest.raises(ConfigError, match=r"samples for 3 observations \(\(m, n, …\) arrays"):
        read_run_samples(trained, path=result.path)
    ppd = sample_run(trained, "ppd", n=4, seed=3, observation=BATCH)
    with np.load(ppd.path) as f:
        assert {k: f[k].shape for k in f.files} == {"z": (3, 4, 2), "x": (3, 4, 2)}
    with pytest.raises(ShapeError, match=r"observation has shape \(3, 3\)"):
        sample_run(trained, "posterior", n=4, observation=np.zeros((3, 3)))


def test_batched_draws_on_ray_equal_the_draws_here(trained, no_leaked_actors):
    here = sample_run(trained, "posterior", n=30, seed=5, observation=BATCH)
    on_ray = sample_run(trained, "posterior", n=30, seed=5, observation=BATCH, ray=True)
    assert on_ray.ray and on_ray.batch == 3
    with np.load(here.path) as a, np.load(on_ray.path) as b:
        np.testing.assert_allclose(a["z"], b["z"], rtol=1e-6, atol=1e-9)


def test_check_calibration_reports_the_undertrained_posterior(trained, capsys):
    status = main(
        ["check", "calibration", "-o", str(trained), "-n", "100", "--samples", "200", "--seed", "0"]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.startswith("kestrel check calibration: underconfident"), out
    report = json.loads((trained / "checks" / "calibration.json").read_text())
    assert (report["n"], report["samples"], report["from"], report["seed"]) == (
        100,
        200,
        "proposal",
        0,
    )
    assert len(report["levels"]) == len(report["coverage"]) == 19
    assert report["verdict"] == "underconfident" and report["max_deviation"] > 0.1
    assert report["ranks"]["names"] == ["z[0]", "z[1]"]
    assert set(report["tarp"]) == {"coverage", "max_deviation", "verdict"}
    assert (trained / "checks" / "calibration.png").stat().st_size > 10_000
    with pytest.warns(UserWarning, match=r"calibration --from prior: node 'z' trained with pro"):
        prior = check_calibration(trained, n=30, samples=40, source="prior", seed=1, image=False)
    assert prior.report["from"] == "prior" and prior.n == 30
    assert "not what the estimator was trained for" in prior.report["warnings"][0]
    with pytest.raises(ConfigError, match="--from 'posterior'"):
        check_calibration(trained, source="posterior")


def test_batched_findings_on_ray_are_numbered_by_observation(trained, monkeypatch):
    monkeypatch.setattr("kestrel.sample._batch.CALL_ROWS", 7)  # calls of 7 rows: 3 calls
    batch = np.array([[0.4, 0.6], [0.1, 0.9], [500.0, 0.6]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sample_run(trained, "posterior", n=5, seed=4, observation=batch, ray=True)
    assert result.ray and result.batch == 3
    text = [str(w.message) for w in caught]
    assert [t for t in text if "other observations (observation rows 1, 2 of 3;" in t], text
    assert [t for t in text if "far x[0] (observation row 2)" in t], text
    meta = json.loads((Path(result.path).with_suffix(".json")).read_text())
    far = {f["row"] for f in meta["observation_checks"] if f["kind"] == "far"}
    assert far == {2}


def test_no_figure_hint_only_without_matplotlib(trained, capsys, monkeypatch):
    import importlib.util

    from kestrel.cli._check import summary_lines

    result = check_calibration(trained, n=20, samples=20, seed=2, image=False)
    assert result.image is None and result.report["warnings"] == []
    hint = "(no figure: pip install"
    if importlib.util.find_spec("matplotlib") is not None:
        assert not [line for line in summary_lines(result) if hint in line]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name)
    )
    assert [line for line in summary_lines(result) if hint in line]


def test_summary_lists_fixed_components():
    from types import SimpleNamespace

    from kestrel.cli._check import summary_lines
    from kestrel_core.diagnostics._calibration import calibration_report

    rng = np.random.default_rng(0)
    truth = np.stack([rng.uniform(size=40), np.full(40, 2.0)], axis=1)
    draws = np.stack([rng.uniform(size=(40, 30)), np.full((40, 30), 2.0)], axis=2)
    report = calibration_report(truth, draws, np.zeros(40), np.zeros((40, 30)), names=["a", "fix"])
    result = SimpleNamespace(
        report=report,
        ray=False,
        verdict=report["verdict"],
        max_deviation=0.1,
        n=40,
        source="proposal",
        samples=30,
        seed=0,
        wall_time=1.0,
        path="calibration.json",
        image="x",
    )
    lines = summary_lines(result)
    assert "  fixed (constant, left out of ranks and TARP): fix = 2" in lines
    assert [line for line in lines if "marginal" in line and "fix " not in line and "a " in line]
