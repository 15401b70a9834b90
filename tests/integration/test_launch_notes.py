"""What a launch on an existing run says before it starts: overrides that change what the
restored rows mean (K31), a -c config that --resume ignores (K32)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from kestrel import launch
from kestrel.preflight._launch_notes import row_key
from kestrel.session._session import RunSession

from .test_launch import toy
from .test_launch_refusals import a_run


@pytest.mark.parametrize(
    ("key", "rows"),
    [
        ("graph.x.simulator.sigma", True),
        ("graph.z.simulator.priors[0][1]", True),
        ("graph.z.simulator", True),
        ("graph.x.parents[0]", True),
        ("graph.y", True),
        ("paths.imports", True),
        ("graph.z.estimator.max_epochs", False),
        ("graph.z.estimator", False),
        ("graph.x.observed", False),
        ("graph.x.num_actors", False),
        ("buffer.max_samples", False),
        ("sample.posterior.n", False),
        ("budget.simulations", False),
    ],
)
def test_k31_which_keys_change_what_a_row_means(key, rows):
    assert row_key(key) is rows


def test_k31_resume_that_changes_the_simulator_warns_naming_keys_and_remedy(tmp_path):
    run = a_run(tmp_path)
    session = RunSession.for_launch(
        None,
        run.root,
        overrides=["graph.x.simulator.sigma=0.5", "graph.z.estimator.max_epochs=7"],
        mode="resume",
    )
    (note,) = session.notes
    assert "graph.x.simulator.sigma: (absent) → 0.5" in note
    assert "max_epochs" not in note  # an estimator key changes no row
    assert "simulated with the old values" in note and "--restart" in note
    assert "\n" not in note
    session.create()  # recorded with the launch
    (_, entry) = json.loads((tmp_path / "run" / "run.json").read_text())["launches"]
    assert entry["notes"] == [note]


def test_k31_a_prior_change_warns_too(tmp_path):
    run = a_run(tmp_path)
    session = RunSession.for_launch(
        None, run.root, overrides=["graph.z.simulator.priors[0][2]=2.0"], mode="resume"
    )
    (note,) = session.notes
    assert "graph.z.simulator.priors[0][2]: 1.0 → 2.0" in note


def test_k31_resume_with_training_keys_or_without_rows_says_nothing(tmp_path):
    run = a_run(tmp_path)
    quiet = RunSession.for_launch(
        None,
        run.root,
        overrides=[
            "graph.z.estimator.max_epochs=7",
            "buffer.max_samples=256",
            "sample.posterior.n=3",
        ],
        mode="resume",
    )
    assert quiet.notes == []
    quiet.create()
    (_, entry) = json.loads((tmp_path / "run" / "run.json").read_text())["launches"]
    assert "notes" not in entry
    # no saved rows: nothing restored, nothing to warn about
    (tmp_path / "bare").mkdir()
    bare = a_run(tmp_path / "bare", rows=False)
    changed = RunSession.for_launch(
        None, bare.root, overrides=["graph.x.simulator.sigma=0.5"], mode="resume"
    )
    assert changed.notes == []


def test_k32_resume_ignores_a_differing_config_and_says_so(tmp_path):
    run = a_run(tmp_path, rows=False)
    other = toy(tmp_path)
    other["graph"]["x"]["simulator"]["sigma"] = 0.2
    other["buffer"]["min_samples"] = 32
    (tmp_path / "my model").mkdir()
    path = tmp_path / "my model" / "config2.yml"
    path.write_text(yaml.safe_dump(other))
    session = RunSession.for_launch(str(path), run.root, mode="resume")
    (note,) = session.notes
    assert note.startswith("--resume: the config given is ignored")
    assert "graph.x.simulator.sigma: (absent) → 0.2" in note
    assert "buffer.min_samples: 64 → 32" in note
    assert "overrides" in note and "--restart" in note
    assert session.config.buffer.min_samples == 64  # the run's own config is used
    # the run's own config given: nothing to say
    same = RunSession.for_launch(toy(tmp_path), run.root, mode="resume")
    assert same.notes == []
    # an override applies to both: still the same
    same = RunSession.for_launch(
        toy(tmp_path), run.root, overrides=["buffer.simulate_count=8"], mode="resume"
    )
    assert same.notes == []


def test_k31_a_resumed_run_with_another_sigma_warns_in_the_driver_log(tmp_path, no_leaked_actors):
    run = tmp_path / "run"
    first = launch(toy(tmp_path), run, seed=3, progress=False)
    assert first.status == "completed"
    second = launch(
        None, run, overrides=["graph.x.simulator.sigma=0.5"], mode="resume", progress=False
    )
    assert second.status == "completed"
    log = (run / "graph" / "driver" / "output.log").read_text()
    assert (
        "WARNING resume: the overrides change what a simulation is (old → new: graph.x.simulator.sigma"
        in log
        and "--restart" in log
    )
    entry = json.loads((run / "run.json").read_text())["launches"][-1]
    assert "graph.x.simulator.sigma" in entry["notes"][0]
    assert np.isfinite(second.seed)
