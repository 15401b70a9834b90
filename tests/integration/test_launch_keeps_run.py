"""A launch that cannot train leaves the run as it was, or ends cleanly, end to end:

* a refused ``--resume`` (its simulator's rows do not fit the run's buffer) puts the run's
  ``config.yml`` and ``observations/`` back byte for byte (K31/K32 class);
* ``max_epochs: 0`` completes, skipping the end-of-run sampling in one line; a failure never
  says weights are on disk when none are;
* a budget smaller than the initial simulation is refused before Ray starts.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from kestrel import launch
from kestrel.cli import main
from kestrel.controller._failure import _on_disk
from kestrel.session._session import RunSession
from kestrel_core import ConfigError

from .test_blame import fragile, write_wide_buffer

FRAGILE = "tests.core.blame_models.Fragile"


def config_files(run) -> dict[str, bytes]:
    """relative path → bytes of ``RUN/config.yml`` and every file under ``RUN/observations/``."""
    files = {"config.yml": (run / "config.yml").read_bytes()}
    for folder, _, names in os.walk(run / "observations"):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                files[os.path.relpath(path, run)] = fh.read()
    return files


def test_refused_resume_leaves_config_and_observations_byte_identical(tmp_path, no_leaked_actors):
    """The run's buffer holds x of (3,) per sample; a ``--resume`` with another simulator and
    another observation is refused (BufferMismatch) and the run's files are as before."""
    run = tmp_path / "run"
    cfg = fragile(tmp_path)
    cfg["graph"]["x"]["simulator"]["limit"] = 9.0  # never raises
    session = RunSession.for_launch(cfg, run, seed=1)  # a run as a first launch leaves it
    session.create()
    session.end_launch(None)
    write_wide_buffer(run)
    before = config_files(run)
    other = tmp_path / "obs2.npy"
    np.save(other, np.array([0.25, 0.75]))
    with pytest.raises(ConfigError, match="--restart"):
        launch(
            None,
            run,
            overrides=["graph.x.simulator.limit=8", f"graph.x.observed={other}"],
            mode="resume",
            progress=False,
        )
    assert config_files(run) == before
    assert yaml.safe_load((run / "config.yml").read_text())["graph"]["x"]["simulator"][
        "limit"
    ] == pytest.approx(9.0)


def test_max_epochs_0_completes_and_skips_sampling(tmp_path, no_leaked_actors, caplog):
    run = tmp_path / "run"
    cfg = fragile(tmp_path)
    cfg["graph"]["x"]["simulator"]["limit"] = 9.0  # never raises
    cfg["graph"]["theta"]["estimator"]["max_epochs"] = 0
    result = launch(cfg, run, seed=2, progress=False)
    assert str(result.status) == "completed"
    assert not result.samples
    log = (run / "graph" / "driver" / "output.log").read_text()
    assert "sampling: skipped; no trained model for 'theta'" in log
    assert "needs a trained model" not in log


def test_failure_message_says_which_weights_are_on_disk():
    assert _on_disk(True, []) == (
        "the buffer snapshot is on disk; no saved weights (a new launch trains from scratch)"
    )
    assert _on_disk(True, ["theta"]) == "the buffer snapshot is on disk; saved weights of 'theta'"
    assert "no buffer snapshot on disk" in _on_disk(False, [])


def test_budget_smaller_than_initial_simulation_refused_before_ray(tmp_path, capsys, monkeypatch):
    started: list[str] = []

    def no_ray(self, *args, **kwargs):
        started.append(str(self.run.root))
        raise AssertionError("Ray was started")

    monkeypatch.setattr(RunSession, "ray", no_ray)
    config = tmp_path / "config.yml"
    cfg = fragile(tmp_path)
    cfg["graph"]["x"]["simulator"]["limit"] = 9.0
    config.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    argv = ["launch", "-c", str(config), "-o", str(run), "--simulations", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "budget.simulations: 1 (of which 1 left) is smaller than the initial simulation" in err
    assert "buffer.min_samples + buffer.validation_samples = 80" in err
    assert not started
    assert not (run / "config.yml").exists()  # nothing written either
    with pytest.raises(ConfigError, match="budget.simulations: 1"):
        launch(cfg, run, overrides=["budget.simulations=1"], progress=False)
    assert not started
