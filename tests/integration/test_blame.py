"""Blame at the right place (K33), simulations that raise (K34), and one key schema per run
(K05, K06: a per-sample shape that changes between calls, a restored buffer of another shape),
end to end."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from kestrel import RunError, launch
from kestrel_core import ConfigError, GraphError, Status, StoreError
from kestrel_core.store import BufferSnapshot, write_buffer_file

from .helpers import run_kestrel

BLAME_MODELS = Path(__file__).resolve().parents[1] / "core" / "blame_models.py"


def fragile(tmp_path, *, on_error=None, dry_run=True):
    """θ ~ U(0, 2.22) × U(0, 1): the simulator raises for θ₀ > 2, about 10 % of prior draws."""
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([1.0, 0.5]))
    x = {
        "simulator": {"_target_": "tests.core.blame_models.Fragile", "limit": 2.0},
        "parents": ["theta"],
        "observed": str(obs),
        "dry_run": dry_run,
    }
    if on_error:
        x["on_error"] = on_error
    return {
        "buffer": {
            "min_samples": 64,
            "max_samples": 128,
            "validation_samples": 16,
            "simulate_count": 16,
            "simulate_interval": 0.05,
        },
        "graph": {
            "theta": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 2.22], ["uniform", 0.0, 1.0]],
                },
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2},
            },
            "x": x,
        },
        "sample": {"posterior": {"n": 5}},
    }


def test_k34_skip_counts_the_raising_samples_and_completes(tmp_path, no_leaked_actors):
    result = launch(fragile(tmp_path, on_error="skip"), tmp_path / "run", seed=1, progress=False)
    assert result.status == "completed"
    assert 0 < result.errors["x"] < 0.3 * (80 + result.simulated)
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["errors"] == result.errors and "nonfinite" in status
    log = (tmp_path / "run" / "graph" / "driver" / "output.log").read_text()
    assert log.count("first simulator exception (on_error: skip)") == 1  # logged once, in full
    assert "Traceback (most recent call last)" in log and "theta[0] > 2.0" in log
    with np.load(result.samples["posterior"]) as data:
        assert np.isfinite(data["theta"]).all()


def test_k34_by_default_the_run_stops_with_a_short_traceback(tmp_path, no_leaked_actors):
    cfg = fragile(tmp_path, dry_run=False)  # the error is met on Ray, not by the dry run
    with pytest.raises(RunError) as info:
        launch(cfg, tmp_path / "run", seed=1, progress=False)
    text = str(info.value)
    assert text.startswith("Traceback (user code only):")
    assert f'File "{BLAME_MODELS}", line' in text and "raise ValueError" in text
    assert "ValueError: theta[0] > 2.0" in text and "node 'x'" in text
    assert "kestrel_ray" not in text and "kestrel_core" not in text and "ray/" not in text
    log = (tmp_path / "run" / "graph" / "driver" / "output.log").read_text()
    assert "Traceback (most recent call last)" in log and "_wrapper.py" in log  # the full one
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def test_k33_cli_blames_the_simulator_before_ray_starts(tmp_path):
    shutil.copy(BLAME_MODELS, tmp_path / "model.py")
    np.save(tmp_path / "obs.npy", np.zeros(60))
    (tmp_path / "config.yml").write_text(
        """
buffer: {min_samples: 64, max_samples: 128, validation_samples: 16}
graph:
  theta:
    simulator: {_target_: kestrel_core.Product, priors: [[uniform, 0, 2], [uniform, 0, 1]]}
    evidence: [x]
    estimator: {_target_: kestrel_torch.GaussianPosterior, max_epochs: 2}
  x:
    simulator: {_target_: model.SIR, days: 59}
    parents: [theta]
    observed: obs.npy
"""
    )
    t0 = time.monotonic()
    proc = run_kestrel("launch", "-c", tmp_path / "config.yml", "-o", tmp_path / "run", timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert "node 'x' (model.SIR) returns (59,) per sample; its observation has (60,)" in proc.stderr
    assert "Traceback" not in proc.stderr and "ray" not in proc.stdout.lower()
    assert not (tmp_path / "run" / "graph").exists()  # stopped before the run started
    assert took < 60, f"the dry run should fail before Ray starts, took {took:.1f} s"


def test_k33_python_launch_raises_a_graph_error_before_ray(tmp_path, monkeypatch):
    import kestrel.session._session as session

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(session, "ray_for_run", no_ray)
    cfg = fragile(tmp_path)
    cfg["graph"]["x"]["simulator"] = {"_target_": "tests.core.blame_models.SIR", "days": 59}
    np.save(tmp_path / "obs.npy", np.zeros(60))
    with pytest.raises(GraphError, match=r"node 'x' \(tests\.core\.blame_models\.SIR\) returns"):
        launch(cfg, tmp_path / "run", progress=False)


WIDE = "tests.core.blame_models.Wide"
BLAME_FRAGILE = "tests.core.blame_models.Fragile"


def test_k05_shape_change_between_blocks_refused(tmp_path, no_leaked_actors):
    """(n, 2) in the dry run's 2-row calls, (n, 3) on Ray: the first block is refused."""
    cfg = fragile(tmp_path, on_error="skip")  # skip is for exceptions, not for wrong outputs
    cfg["graph"]["x"]["simulator"] = {"_target_": WIDE}
    run = tmp_path / "run"
    with pytest.raises(StoreError) as info:
        launch(cfg, run, seed=1, progress=False)
    assert re.search(
        rf"node 'x' \({re.escape(WIDE)}\), key 'x\.value': a block of \d+ new rows has "
        r"per-sample shape \(3,\), expected \(2,\) \(fixed by its observation\); nothing of "
        "it was stored",
        str(info.value),
    ), str(info.value)
    assert not (run / "buffer" / "snapshots" / "buffer.npz").exists()  # nothing was stored
    assert not (run / "graph" / "theta" / "estimator.pt").exists()  # nothing was trained
    assert json.loads((run / "status.json").read_text())["status"] == "failed"


def write_wide_buffer(run) -> None:
    """``RUN/buffer/snapshots/buffer.npz`` with 80 rows whose x has (3,) per sample (what an
    unchecked simulator like Wide left behind), 16 of them validation rows."""
    ids = np.arange(80)
    rng = np.random.default_rng(0)
    write_buffer_file(
        run / "buffer" / "snapshots",
        BufferSnapshot(
            arrays={
                "theta.value": rng.uniform(0, 1, (80, 2)),
                "theta.log_prob": np.zeros(80),
                "x.value": rng.uniform(0, 1, (80, 3)),
            },
            ids=ids,
            statuses=np.where(ids < 16, Status.VALIDATION, Status.TRAINING).astype(np.int8),
            next_id=80,
        ),
    )


def test_k06_restored_buffer_checked_against_schema(tmp_path, no_leaked_actors):
    """A buffer saved with x of (3,) per sample (what an unchecked Wide left behind) is not
    restored into a run whose x has (2,): named, with the remedy, before any training."""
    run = tmp_path / "run"
    cfg = fragile(tmp_path)
    cfg["graph"]["x"]["simulator"] = {"_target_": WIDE}
    with pytest.raises(StoreError, match="per-sample shape"):  # refused now (K05)
        launch(cfg, run, seed=1, progress=False)
    # …but a run an unchecked launch left has its rows of shape (3,) in buffer.npz
    write_wide_buffer(run)
    saved = (run / "buffer" / "snapshots" / "buffer.npz").read_bytes()
    with pytest.raises(ConfigError) as info:
        launch(
            None,
            run,
            overrides=[f"graph.x.simulator._target_={BLAME_FRAGILE}", "graph.x.simulator.limit=9"],
            mode="resume",
            progress=False,
        )
    text = str(info.value)
    assert "node 'x' (tests.core.blame_models.Fragile), key 'x.value'" in text
    assert "per-sample shape (3,), expected (2,) (fixed by its observation)" in text
    assert f"kestrel launch -o {run} --restart" in text
    assert not (run / "graph" / "theta" / "estimator.pt").exists()  # nothing trained on them
    assert (run / "buffer" / "snapshots" / "buffer.npz").read_bytes() == saved  # left as it was
    log = (run / "graph" / "driver" / "output.log").read_text().split("launch: run ")[-1]
    assert "failure: the run's saved buffer does not fit its graph" in log  # this launch's
    assert "continue the run with" not in log  # not the hint that would restore them again
