"""Run folders and the user's folders, without Ray (K30, K32).

Kestrel writes a run only into a new or empty folder or a run it wrote (``run.json``), never
over a file it did not write; a run finds its code through the path relative to it first; a
run's code is compared by the files its targets import; a run whose code folder is gone never
takes a ``model.py`` from the folder Python was started from.
"""

from __future__ import annotations

import shutil
import sys

import pytest
import yaml

from kestrel.rundir._code import code_changes
from kestrel.rundir._config import (
    load_run_config,
    portable_config,
    run_config_yaml,
    save_observations,
)
from kestrel.rundir._folder import (
    check_launch_folder,
    check_restart_keeps,
    check_run_folder,
    folder_kind,
    is_run_folder,
)
from kestrel_core import ConfigError, import_target, load_config
from tests.core.model_folders import files, model_folder, write_model


def record(source, run, **kw):
    """A run as a launch records it: config.yml (portable) and run.json."""
    cfg = load_config(source, run_dir=run, **kw)
    run.mkdir(parents=True, exist_ok=True)
    data = portable_config(cfg, run, save_observations(cfg, run))
    (run / "config.yml").write_text(run_config_yaml(data))
    (run / "run.json").write_text('{"launches": []}\n')
    return cfg


def test_k30_launch_refuses_a_model_folder(tmp_path):
    m = model_folder(tmp_path / "m", "rfs_model")
    before = files(m)
    for mode in ("auto", "resume", "restart"):
        with pytest.raises(ConfigError) as err:
            check_launch_folder(m, mode)
        text = str(err.value)
        assert "\n" not in text and str(m) in text and "not a Kestrel run" in text
        assert f"kestrel launch -c {m / 'config.yml'} -o {m / 'run1'}" in text
    assert "--restart would move your files" in text
    assert files(m) == before


def test_k30_launch_folder_kinds(tmp_path):
    assert check_launch_folder(tmp_path / "new" / "run") == "new"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".gitkeep").write_text("")
    assert check_launch_folder(tmp_path / "empty") == "empty"
    for marker in ("run.json", "status.json"):  # status.json: runs older than run.json
        run = tmp_path / marker.split(".")[0]
        run.mkdir()
        (run / marker).write_text("{}")
        (run / "config.yml").write_text("graph: {}\n")
        assert check_launch_folder(run) == "run" and is_run_folder(run)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert folder_kind(tmp_path / "other") == "other" and not is_run_folder(tmp_path / "other")
    with pytest.raises(ConfigError, match="it holds notes.txt"):
        check_launch_folder(tmp_path / "other")


def test_k30_launch_to_a_file_is_a_one_line_error(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(ConfigError, match=rf"^{afile} is a file, not a folder; give -o a new"):
        check_launch_folder(afile)
    with pytest.raises(ConfigError, match=rf"{afile / 'sub'} lies under {afile}, which is a file"):
        check_launch_folder(afile / "sub")
    with pytest.raises(ConfigError, match="not a run directory"):
        check_run_folder(afile)
    assert afile.read_text() == "mine"


def test_k30_sample_refuses_a_model_folder(tmp_path):
    m = model_folder(tmp_path / "m", "rfs_model")
    with pytest.raises(ConfigError) as err:
        check_run_folder(m)
    assert "not a run directory (no run.json" in str(err.value)
    assert f"kestrel launch -c {m / 'config.yml'} -o {m / 'run1'}" in str(err.value)
    with pytest.raises(ConfigError, match=r"no config.yml\); start a run"):
        check_run_folder(tmp_path / "nothing")
    record(m / "config.yml", tmp_path / "run")
    check_run_folder(tmp_path / "run")


def test_k30_restart_never_moves_the_code_it_restarts_with(tmp_path):
    run = tmp_path / "run"
    (run / "code").mkdir(parents=True)
    check_restart_keeps(run, [str(tmp_path / "elsewhere")])
    for inside in (run, run / "code"):
        with pytest.raises(ConfigError, match="lies inside the run"):
            check_restart_keeps(run, [str(inside)])


def test_k30_the_run_relative_code_folder_wins_over_the_absolute_one(tmp_path):
    """A copied project (model folder and run) uses its own copy of the code, although the
    original's absolute path, recorded in the run, still exists."""
    m = model_folder(tmp_path / "proj" / "m", "rfs_model")
    record(m / "config.yml", tmp_path / "proj" / "run1")
    saved = yaml.safe_load((tmp_path / "proj" / "run1" / "config.yml").read_text())
    assert saved["paths"]["imports"] == [str(m), "../m"]
    shutil.copytree(tmp_path / "proj", tmp_path / "proj2")
    assert load_run_config(tmp_path / "proj" / "run1").paths.imports == (str(m),)
    copy = load_run_config(tmp_path / "proj2" / "run1")
    assert copy.paths.imports == (str(tmp_path / "proj2" / "m"),)
    assert copy.graph.nodes["x"].simulator.imports == (str(tmp_path / "proj2" / "m"),)
    # the run alone, moved where no ../m exists: the absolute path is the fallback
    shutil.copytree(tmp_path / "proj" / "run1", tmp_path / "alone" / "deeper" / "run1")
    assert load_run_config(tmp_path / "alone" / "deeper" / "run1").paths.imports == (str(m),)


def test_k32_another_model_py_is_a_differing_key(tmp_path):
    m = model_folder(tmp_path / "m", module="rfs_k32_model")
    recorded = record(m / "config.yml", tmp_path / "run1")
    recorded = load_run_config(tmp_path / "run1", check_targets=())
    same = load_config(m / "config.yml", run_dir=tmp_path / "run1", check_targets=())
    assert code_changes(recorded, same) == []

    shutil.copytree(m, tmp_path / "m6")  # a copy with its own (edited) model file
    write_model(tmp_path / "m6" / "rfs_k32_model.py", 100.0)
    other = load_config(tmp_path / "m6" / "config.yml", run_dir=tmp_path / "run1", check_targets=())
    (change,) = code_changes(recorded, other)
    assert change.key == "paths.imports"
    assert str(change) == (
        f"paths.imports: {m / 'rfs_k32_model.py'} → {tmp_path / 'm6' / 'rfs_k32_model.py'}"
    )

    # a config of installed targets only, copied into another folder: the same code
    plain = {"graph": {"x": {"simulator": "collections.OrderedDict"}}}
    a = load_config(plain, base_dir=tmp_path / "m", check_targets=())
    b = load_config(plain, base_dir=tmp_path / "m6", check_targets=())
    assert a.paths.imports != b.paths.imports and code_changes(a, b) == []


@pytest.fixture
def started_in(tmp_path, monkeypatch):
    """Python started in a folder holding a decoy module (``''`` on sys.path, as in the REPL
    or ``python -c``); the decoy is dropped from sys.modules afterwards."""
    decoy = tmp_path / "cwd"
    decoy.mkdir()
    write_model(decoy / "rfs_decoy_model.py", 100.0)
    monkeypatch.chdir(decoy)
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    yield decoy
    for name in [n for n in sys.modules if n == "rfs_decoy_model"]:
        del sys.modules[name]


def test_k30_a_gone_code_folder_never_takes_the_working_directorys_module(tmp_path, started_in):
    gone = str(tmp_path / "moved-away")
    with pytest.raises(ConfigError) as err:
        import_target("rfs_decoy_model.Shift", [gone])
    text = str(err.value)
    assert "no module named 'rfs_decoy_model'" in text and gone in text
    assert str(started_in / "rfs_decoy_model.py") in text
    assert "rfs_decoy_model" not in sys.modules

    import rfs_decoy_model  # noqa: F401  (the user imported it in the session: still refused)

    with pytest.raises(ConfigError, match="no module named 'rfs_decoy_model'"):
        import_target("rfs_decoy_model.Shift", [gone])


def test_the_working_directory_still_serves_a_config_whose_folders_exist(tmp_path, started_in):
    """What the refusal leaves alone: existing code folders (a package found beside them, as
    the test suite's ``tests.*`` targets), and the working directory as the config's folder."""
    (tmp_path / "code").mkdir()
    assert import_target("rfs_decoy_model.Shift", [str(tmp_path / "code")]).__name__ == "Shift"
    del sys.modules["rfs_decoy_model"]
    assert import_target("rfs_decoy_model.Shift", [str(started_in)]).__name__ == "Shift"
