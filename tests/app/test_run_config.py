"""A run's own config.yml: relocatable paths, copied observations, config diff (K30, K32, K36)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import yaml

from kestrel.rundir._config import (
    config_digest,
    load_run_config,
    portable_config,
    run_config_changes,
    run_config_yaml,
    save_observations,
)
from kestrel_core import ConfigError, load_config
from kestrel_core.config._diff import MISSING, config_changes, describe_changes

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["uniform", 0.0, 1.0]] * 2}


def config(observed, **buffer):
    return {
        "buffer": {"min_samples": 4, "max_samples": 8, "validation_samples": 2, **buffer},
        "graph": {
            "z": {"simulator": PRIOR, "evidence": ["x"]},
            "x": {
                "simulator": "kestrel_core.testing.models.Shift",
                "parents": ["z"],
                "observed": observed,
            },
        },
    }


def record(cfg, run):
    """What ``RunDir.write_config`` does: copy the observations, write config.yml."""
    data = portable_config(cfg, run, save_observations(cfg, run))
    (run / "config.yml").write_text(run_config_yaml(data))
    return data


def test_config_changes_name_dotted_keys_old_and_new():
    old = {"a": {"b": 1, "c": [1, 2]}, "d": "x", "gone": 1}
    new = {"a": {"b": 1.0, "c": [1, 3]}, "d": "y", "added": True}
    changes = config_changes(old, new)
    assert [(c.key, c.old, c.new) for c in changes] == [
        ("a.c[1]", 2, 3),
        ("d", "x", "y"),
        ("gone", 1, MISSING),
        ("added", MISSING, True),
    ]
    assert describe_changes(changes, limit=2) == "a.c[1]: 2 → 3; d: 'x' → 'y'; and 2 more"
    assert config_changes({"g": {"n": {"o": 1}}}, {"g": {"n": {"o": 2}}}, ignore=["g.*.o"]) == []


def test_k36_in_memory_observation_is_saved_inside_the_run(tmp_path):
    run = tmp_path / "run"
    obs = np.array([0.25, 0.75])
    cfg = load_config(config(obs), run_dir=run)
    data = record(cfg, run)
    assert data["graph"]["x"]["observed"] == "observations/x.npy"
    np.testing.assert_array_equal(np.load(run / "observations" / "x.npy"), obs)
    again = load_run_config(run)  # no placeholder read back as a file name
    np.testing.assert_array_equal(again.graph.nodes["x"].observed, obs)


def test_k30_nothing_inside_the_run_is_an_absolute_path(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    np.savez(data_dir / "obs.npz", x=np.array([0.4, 0.6]), z_true=np.array([0.4, 0.6]))
    run = tmp_path / "run"
    cfg = load_config(
        config(str(data_dir / "obs.npz") + "['x']", initial_samples_path="${run_dir}/init.npz"),
        run_dir=run,
    )
    record(cfg, run)
    text = (run / "config.yml").read_text()
    assert str(run) not in text and str(data_dir) not in text
    saved = yaml.safe_load(text)
    assert saved["graph"]["x"]["observed"] == "observations/x.npz['x']"
    assert saved["buffer"]["initial_samples_path"] == "init.npz"
    assert "run_dir" not in saved and "graph" not in saved["paths"]
    with np.load(run / "observations" / "x.npz") as copied:  # the whole file: truth kept
        assert sorted(copied.files) == ["x", "z_true"]

    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(run, moved)
    shutil.rmtree(data_dir)  # the original data is gone: the run has its own copy
    again = load_run_config(moved)
    assert again.paths.graph == str(moved / "graph") and again.run_dir == str(moved)
    assert again.buffer.initial_samples_path == str(moved / "init.npz")
    np.testing.assert_array_equal(again.graph.nodes["x"].observed, [0.4, 0.6])


def test_paths_inside_the_run_are_rerooted_outside_stay(tmp_path):
    run = tmp_path / "run"
    outside = tmp_path / "scratch"
    cfg = load_config(
        {**config([1.0, 2.0]), "paths": {"graph": "${run_dir}/weights", "samples": str(outside)}},
        run_dir=run,
    )
    saved = record(cfg, run)["paths"]
    assert saved["graph"] == "${run_dir}/weights" and saved["samples"] == str(outside)
    moved = tmp_path / "moved"
    shutil.move(run, moved)
    again = load_run_config(moved).paths
    assert again.graph == str(moved / "weights") and again.samples == str(outside)


def test_code_is_found_after_the_run_moved_with_it(tmp_path):
    project = tmp_path / "project"
    (project / "code").mkdir(parents=True)
    (project / "code" / "h1_moved_model.py").write_text(
        "class Sim:\n    def simulate_batch(self, n, z):\n        return z\n"
    )
    run = project / "runs" / "a"
    source = config([0.5, 0.5])
    source["graph"]["x"]["simulator"] = "h1_moved_model.Sim"
    source["paths"] = {"imports": [str(project / "code")]}
    cfg = load_config(source, run_dir=run)
    assert record(cfg, run)["paths"]["imports"] == [str(project / "code"), "../../code"]

    shutil.move(project, tmp_path / "copy")  # the absolute path is gone; the relative one works
    again = load_run_config(tmp_path / "copy" / "runs" / "a")
    assert again.paths.imports == (str(tmp_path / "copy" / "code"),)


def test_an_older_run_config_with_absolute_paths_is_rerooted(tmp_path):
    old = tmp_path / "old"
    run = tmp_path / "run"
    (run / "observations").mkdir(parents=True)
    np.save(run / "observations" / "x.npy", np.array([1.0, 2.0]))
    legacy = config(str(old / "observations" / "x.npy"))
    legacy["run_dir"] = str(old)
    legacy["paths"] = {"graph": str(old / "graph"), "samples": str(old / "samples")}
    (run / "config.yml").write_text(yaml.safe_dump(legacy))
    cfg = load_run_config(run)
    assert cfg.paths.graph == str(run / "graph") and cfg.run_dir == str(run)
    np.testing.assert_array_equal(cfg.graph.nodes["x"].observed, [1.0, 2.0])


def test_k32_run_config_changes_ignore_locations_but_see_values(tmp_path):
    run = tmp_path / "run"
    np.save(tmp_path / "obs.npy", np.array([0.4, 0.6]))
    first = load_config(config(str(tmp_path / "obs.npy")), run_dir=run)
    record(first, run)
    recorded = load_run_config(run)
    same = load_config(config(np.array([0.4, 0.6])), run_dir=run)  # same values, other source
    assert run_config_changes(recorded, same, run) == []
    assert config_digest(portable_config(recorded, run)) == config_digest(
        portable_config(same, run)
    )

    other = config(np.array([0.4, 0.7]), min_samples=6)
    changes = run_config_changes(recorded, load_config(other, run_dir=run), run)
    assert [c.key for c in changes] == ["buffer.min_samples", "graph.x.observed"]
    text = describe_changes(changes)
    assert "buffer.min_samples: 4 → 6" in text and "data (2,) float64 sha256" in text


def test_load_run_config_of_a_directory_without_one(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        load_run_config(tmp_path)


def test_a_run_config_can_seed_another_run(tmp_path):
    """``-c RUN/config.yml -o OTHER``: its relative observation resolves against RUN."""
    run = tmp_path / "run"
    record(load_config(config([0.1, 0.2]), run_dir=run), run)
    other = load_config(str(run / "config.yml"), run_dir=tmp_path / "other")
    assert other.paths.graph == os.path.join(tmp_path, "other", "graph")
    np.testing.assert_array_equal(other.graph.nodes["x"].observed, [0.1, 0.2])
