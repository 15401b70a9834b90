"""The run directory as a self-contained record: copy, move, explicit intent, exit codes (K30, K32, K36)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import yaml

import kestrel.controller._launch as _launch
from kestrel import RunDir, launch
from kestrel.cli import main
from kestrel.controller._result import RunResult
from kestrel.controller._states import RunStatus
from kestrel.session._session import RunSession
from kestrel_core import ConfigError, load_config

from .helpers import run_kestrel
from .test_launch import toy


def contents(root) -> dict[str, tuple[int, str]]:
    """``{relative path: (mtime_ns, sha256)}`` of every file under ``root``."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            out[os.path.relpath(path, root)] = (os.stat(path).st_mtime_ns, digest)
    return out


def npz_files(folder) -> list[str]:
    return sorted(str(p) for p in folder.rglob("*.npz") if p.name != "observation.npz")


def test_k30_k36_a_copied_or_moved_run_touches_only_itself(tmp_path, no_leaked_actors):
    run, copy, moved = tmp_path / "run", tmp_path / "copy", tmp_path / "moved"
    cfg = toy(tmp_path)
    cfg["graph"]["x"]["observed"] = np.array([0.4, 0.6])  # K36: an in-memory observation
    first = launch(cfg, run, seed=1, progress=False)
    assert first.status == "completed"
    saved = yaml.safe_load((run / "config.yml").read_text())
    assert saved["graph"]["x"]["observed"] == "observations/x.npy"
    assert str(run) not in (run / "config.yml").read_text()

    shutil.copytree(run, copy)
    before = contents(run)
    again = launch(
        None,
        copy,
        overrides=["graph.z.estimator.max_epochs=3"],
        seed=2,
        timeout=120,
        progress=False,
    )
    assert again.resumed == ["z"] and again.run_dir == str(copy)
    assert contents(run) == before  # the original is byte-identical, untouched
    assert all(p.startswith(str(copy)) for p in again.samples.values())
    assert len(npz_files(copy / "samples" / "posterior")) == 2
    history = json.loads((copy / "run.json").read_text())["launches"]
    assert [(e["launch"], e["mode"], e["seed"], e["status"]) for e in history] == [
        (1, "new", 1, "completed"),
        (2, "resume", 1, "completed"),  # a resumed run keeps its first seed (K31)
    ]
    assert history[0]["config_sha256"] != history[1]["config_sha256"]  # max_epochs changed
    assert history[1]["epochs"] == again.epochs and history[1]["ended"]

    shutil.move(run, moved)  # K30 / K36: sampled from a new process, where it lies now
    sampled = run_kestrel("sample", "posterior", "-o", moved, "-n", "100", "--seed", "3")
    assert sampled.returncode == 0, sampled.stdout + sampled.stderr
    files = npz_files(moved / "samples" / "posterior")
    assert len(files) == 2 and not run.exists()
    with np.load(max(files, key=os.path.getmtime)) as data:
        assert data["z"].shape == (100, 2)


def test_k32_a_differing_config_names_its_keys_and_the_choices(tmp_path):
    run = RunDir(tmp_path / "run")
    session = RunSession.for_launch(toy(tmp_path), run.root, seed=4)
    session.create()
    session.end_launch(None)
    new = toy(tmp_path)
    new["graph"]["x"]["simulator"]["sigma"] = 0.2
    new["buffer"]["min_samples"] = 32
    (tmp_path / "new.yml").write_text(yaml.safe_dump(new))

    done = run_kestrel("launch", "-c", tmp_path / "new.yml", "-o", run.root, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr
    assert "graph.x.simulator.sigma: (absent) → 0.2" in message
    assert "buffer.min_samples: 64 → 32" in message
    assert "--resume" in message and "--restart" in message
    assert not (tmp_path / "run" / "previous").exists()

    with pytest.raises(ConfigError, match="2 keys differ"):
        RunSession.for_launch(new, run.root)
    same = RunSession.for_launch(toy(tmp_path), run.root)  # the recorded config: resume
    assert same.mode == "resume" and same.config_from_run

    # without -c, an override may change training and sampling settings only (K32's kind)
    plain = RunSession.for_launch(
        None, run.root, overrides=["graph.z.estimator.max_epochs=9", "sample.posterior.n=5"]
    )
    assert plain.mode == "resume" and plain.config.sample["posterior"].n == 5
    with pytest.raises(ConfigError, match=r"graph.x.simulator.sigma: (\S+) → 0.3.*--resume"):
        RunSession.for_launch(None, run.root, overrides=["graph.x.simulator.sigma=0.3"])

    resumed = RunSession.for_launch(
        new, run.root, overrides=["buffer.simulate_count=8"], mode="resume"
    )
    assert resumed.config.buffer.min_samples == 64  # the run's own config ...
    assert resumed.config.buffer.simulate_count == 8  # ... plus the overrides

    before = contents(run.root)
    restarted = RunSession.for_launch(new, run.root, seed=5, mode="restart")
    restarted.create()
    assert restarted.archived == str(tmp_path / "run" / "previous" / "1")
    assert contents(restarted.archived) == before  # the old contents, moved as they were
    assert load_config(tmp_path / "run" / "config.yml").buffer.min_samples == 32
    launches = json.loads((tmp_path / "run" / "run.json").read_text())["launches"]
    assert [(e["mode"], e["seed"]) for e in launches] == [("restart", 5)]


@pytest.mark.parametrize(
    ("argv", "mode", "config"),
    [
        (["-o", "{run}"], "auto", None),  # an existing run without -c: resume
        (["-o", "{run}", "-c", "new.yml", "--restart"], "restart", "new.yml"),
        (["-o", "{run}", "--resume", "k=1"], "resume", None),
    ],
)
def test_launch_flags_say_which_config(argv, mode, config, tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.write_config(load_config(toy(tmp_path), run_dir=run.root))
    seen = {}

    def fake(cfg, run_dir, **kw):
        seen.update(cfg=cfg, **kw)
        return RunResult(str(run_dir), RunStatus.COMPLETED, 1)

    monkeypatch.setattr(_launch, "launch", fake)
    assert main(["launch", *(a.format(run=run.root) for a in argv)]) == 0
    assert seen["mode"] == mode and seen["cfg"] == config


@pytest.mark.parametrize(
    ("status", "code"), [("completed", 0), ("timeout", 0), ("interrupted", 130)]
)
def test_launch_exit_status(status, code, tmp_path, monkeypatch, capsys):
    def fake(cfg, run_dir, **kw):
        return RunResult(str(run_dir), RunStatus(status), 1, reason=status)

    monkeypatch.setattr(_launch, "launch", fake)
    assert main(["launch", "-c", "x.yml", "-o", str(tmp_path / "run")]) == code
    assert status in capsys.readouterr().out


def test_ctrl_c_while_ray_starts_is_recorded_as_interrupted(tmp_path, monkeypatch):
    # a Ctrl-C before the launcher exists (ray.init takes seconds) is what the CLI says it is
    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(RunSession, "ray", interrupted)
    with pytest.raises(KeyboardInterrupt):
        launch(toy(tmp_path), tmp_path / "run", seed=1, progress=False)
    (entry,) = json.loads((tmp_path / "run" / "run.json").read_text())["launches"]
    assert entry["status"] == "interrupted" and entry["reason"] == "Ctrl-C before training started"
