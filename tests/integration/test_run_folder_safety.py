"""``kestrel launch`` / ``sample`` and the user's folders, end to end but without starting Ray
(K30, K32): a model folder is never written into or moved, a file is no run folder, another
code folder is a differing key, a copied project uses its own code, and a run whose code is
gone never samples with a ``model.py`` of the folder Python was started from.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from kestrel import RunDir, sample_run
from kestrel.cli import main
from kestrel.session._session import RunSession
from kestrel_core import ConfigError, load_config
from tests.core.model_folders import GAUSSIAN, files, write_model
from tests.core.model_folders import model_folder as shared_model_folder


def model_folder(folder, module="rfs_int_model", extra=0.0):
    """A user's model folder whose config a launch can train (a Gaussian estimator)."""
    return shared_model_folder(folder, module, extra, estimator=GAUSSIAN)


def new_run(config, run):
    """A run as a launch leaves it before training (config.yml, observations, run.json)."""
    session = RunSession.for_launch(str(config), run, seed=3)
    session.create()
    session.end_launch(None)
    return run


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    return err


def test_k30_launch_refuses_a_model_folder(tmp_path, capsys, monkeypatch):
    m = model_folder(tmp_path / "m")
    before = files(m)
    started: list[str] = []  # refused before Ray: the session never asks for it

    def no_ray(self, *args, **kwargs):
        started.append(str(self.run.root))
        raise AssertionError("Ray was started")

    monkeypatch.setattr(RunSession, "ray", no_ray)
    monkeypatch.chdir(m)  # `cd m; kestrel launch -o . --seed 0`
    argvs = [
        ["launch", "-o", ".", "--seed", "0"],
        ["launch", "-c", "config.yml", "-o", ".", "--restart"],
        ["launch", "-c", "config.yml", "-o", ".", "--resume"],
        ["launch", "-c", "config.yml", "-o", str(m)],
    ]
    for argv in argvs:
        assert main(argv) == 1, argv
        err = error_line(capsys)
        assert f"{m} is not a Kestrel run (no run.json)" in err
        assert f"-o {m / 'run1'}" in err
    assert "--restart would move your files" not in err
    assert files(m) == before and not started

    # sampling it says how to make a run of it, not to launch into it
    assert main(["sample", "posterior", "-o", "."]) == 1
    err = error_line(capsys)
    assert "not a run directory (no run.json" in err and f"-o {m / 'run1'}" in err
    assert files(m) == before


def test_k30_the_run_folder_never_overwrites_or_moves_the_users_files(tmp_path):
    m = model_folder(tmp_path / "m")
    before = files(m)
    config = load_config(m / "config.yml", run_dir=m, check_targets=())
    with pytest.raises(ConfigError, match="not a Kestrel run"):
        RunDir(m).write_config(config)
    with pytest.raises(ConfigError, match="nothing was moved"):
        RunDir(m).archive()
    assert files(m) == before


def test_k30_launch_to_a_file_is_a_one_line_error(tmp_path, capsys):
    m = model_folder(tmp_path / "m")
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for out in (afile, afile / "sub"):
        assert main(["launch", "-c", str(m / "config.yml"), "-o", str(out)]) == 1
        assert "not a folder; give -o a new folder" in error_line(capsys)
    assert main(["sample", "prior", "-o", str(afile)]) == 1
    assert "not a run directory (not a folder)" in error_line(capsys)
    assert afile.read_text() == "mine"


def test_k30_restart_refuses_a_run_that_holds_its_code(tmp_path):
    run = tmp_path / "run"
    new_run(model_folder(tmp_path / "m") / "config.yml", run)
    inner = model_folder(run / "code", module="rfs_inner_model")
    before = files(run)
    with pytest.raises(ConfigError, match="lies inside the run"):
        RunSession.for_launch(str(inner / "config.yml"), run, mode="restart")
    assert files(run) == before and not (run / "previous").exists()


def test_k32_another_code_folder_is_a_differing_key(tmp_path, capsys):
    m = model_folder(tmp_path / "m", module="rfs_k32_model")
    run = new_run(m / "config.yml", tmp_path / "run1")
    same = RunSession.for_launch(str(m / "config.yml"), run)
    assert same.mode == "resume"

    m6 = tmp_path / "m6"
    shutil.copytree(m, m6)
    write_model(m6 / "rfs_k32_model.py", 100.0)
    expected = f"paths.imports: {m / 'rfs_k32_model.py'} → {m6 / 'rfs_k32_model.py'}"
    with pytest.raises(ConfigError, match="1 key differs") as err:
        RunSession.for_launch(str(m6 / "config.yml"), run, mode="auto")
    assert expected in str(err.value) and "--resume" in str(err.value)
    assert main(["launch", "-c", str(m6 / "config.yml"), "-o", str(run), "--epochs", "1"]) == 1
    err = error_line(capsys)
    assert expected in err and "--restart" in err

    resumed = RunSession.for_launch(str(m6 / "config.yml"), run, mode="resume")
    assert resumed.config.paths.imports == (str(m),)  # the run's own code
    restarted = RunSession.for_launch(str(m6 / "config.yml"), run, mode="restart")
    assert restarted.config.paths.imports == (str(m6),)

    # the project copied (model folder and run): the copy's config is the copied run's own
    shutil.copytree(m, tmp_path / "proj2" / "m")
    shutil.copytree(run, tmp_path / "proj2" / "run1")
    copy = RunSession.for_launch(
        str(tmp_path / "proj2" / "m" / "config.yml"), tmp_path / "proj2" / "run1"
    )
    assert copy.mode == "resume"


def test_k30_a_copied_project_samples_with_its_own_code(tmp_path):
    m = model_folder(tmp_path / "proj" / "m", module="rfs_copy_model")
    run = new_run(m / "config.yml", tmp_path / "proj" / "run1")
    shutil.copytree(tmp_path / "proj", tmp_path / "proj2")
    write_model(tmp_path / "proj2" / "m" / "rfs_copy_model.py", 100.0)

    for root, shift in ((run, 0.0), (tmp_path / "proj2" / "run1", 100.0)):
        result = sample_run(root, "prior", n=5, seed=0)
        with np.load(result.path) as data:
            np.testing.assert_allclose(data["x"] - data["z"], shift)


def test_k30_a_run_whose_code_is_gone_never_uses_the_working_directorys_model(tmp_path):
    m = model_folder(tmp_path / "m", module="model")
    run = new_run(m / "config.yml", tmp_path / "run1")
    shutil.move(m, tmp_path / "moved-away")
    decoy = model_folder(tmp_path / "decoy", module="model", extra=100.0)
    code = f"from kestrel import sample_run; sample_run({str(run)!r}, 'prior', n=5, seed=0)"
    for argv in ([sys.executable, "-c", code], [sys.executable, "script.py"]):
        (decoy / "script.py").write_text(code + "\n")
        done = subprocess.run(
            argv, cwd=decoy, capture_output=True, text=True, timeout=120, env=dict(os.environ)
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert "no module named 'model'" in done.stderr and str(m) in done.stderr
    assert not (run / "samples" / "prior").exists()
