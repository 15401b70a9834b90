"""``~`` in a path the user gives is expanded as a shell expands it; an empty config names its
file (K42, issue 30 item 6).

``-o '~'`` or ``-o '~/runs/a'`` given literally (quoted, from Python, from a config) once made a
folder named ``~`` in the working directory — and ``rm -rf ~`` afterwards deletes the home.
Every path entering Kestrel (CLI arguments, the config's paths, the Python entry points) now
expands it; ``HOME`` points into the test's folder here.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

from kestrel.cli import main
from kestrel.cli._main import build_parser
from kestrel.rundir._config import load_run_config
from kestrel.rundir._folder import check_launch_folder, check_run_folder, folder_kind
from kestrel.rundir._rundir import RunDir
from kestrel_core import ConfigError, load_config, load_observation

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["uniform", 0.0, 1.0]] * 2}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``~`` is ``tmp_path/home``; the working directory is ``tmp_path/cwd``."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path / "cwd")
    yield home
    assert not os.path.lexists(tmp_path / "cwd" / "~"), "a folder named ~ was made"


def config(observed="~/data/obs.npy"):
    return {
        "buffer": {"min_samples": 4, "max_samples": 8, "validation_samples": 2},
        "graph": {
            "z": {"simulator": PRIOR, "evidence": ["x"]},
            "x": {
                "simulator": "kestrel_core.testing.models.Shift",
                "parents": ["z"],
                "observed": observed,
            },
        },
    }


@pytest.mark.parametrize(
    "argv, attribute",
    [
        (["launch", "-o", "~/runs/a"], "output"),
        (["launch", "-c", "~/m/config.yml", "-o", "~/runs/a"], "config"),
        (["sample", "posterior", "-o", "~/runs/a"], "output"),
        (["check", "calibration", "-o", "~/runs/a"], "output"),
        (["plot", "-o", "~/runs/a", "--image", "~/p.png", "--file", "~/s.npz"], "image"),
        (["plot", "-o", "~/runs/a", "--file", "~/s.npz"], "file"),
        (["export", "-o", "~/runs/a", "--to", "~/p.nc"], "to"),
        (["simulate", "-c", "~/m/config.yml", "-n", "2", "-o", "~/out.npz"], "output"),
        (["graph", "-c", "~/m/config.yml"], "config"),
    ],
)
def test_k42_cli_paths_expand_the_tilde(home, argv, attribute):
    args = build_parser()[0].parse_args(argv)
    value = getattr(args, attribute)
    assert value.startswith(str(home) + os.sep) and "~" not in value
    assert "~" not in (getattr(args, "output", None) or "")


def test_k42_a_lone_tilde_is_the_home_folder_never_a_folder_named_tilde(home):
    assert build_parser()[0].parse_args(["launch", "-o", "~"]).output == str(home)
    (home / ".bashrc").write_text("mine")
    (home / "notes.txt").write_text("mine")
    assert folder_kind("~") == "other"
    with pytest.raises(ConfigError, match=rf"^{home} is your home folder"):
        check_launch_folder("~")  # never a run folder: refused, naming it
    assert check_launch_folder("~/runs/a") == "new"
    assert RunDir("~/runs/a").root == str(home / "runs" / "a")
    with pytest.raises(ConfigError, match=rf"{home / 'nothing'}: not a run directory"):
        check_run_folder("~/nothing")


def test_k42_config_paths_and_python_entry_points_expand_the_tilde(home):
    (home / "data").mkdir()
    np.save(home / "data" / "obs.npy", np.array([0.4, 0.6]))
    np.savez(home / "init.npz", z=np.zeros((2, 2)))
    cfg = load_config(config(), run_dir="~/runs/a")
    assert cfg.run_dir == str(home / "runs" / "a")
    assert cfg.paths.graph == str(home / "runs" / "a" / "graph")
    np.testing.assert_array_equal(cfg.graph.nodes["x"].observed, [0.4, 0.6])
    data = config()
    data["paths"] = {"samples": "~/samples", "imports": ["~/code"]}
    data["buffer"]["initial_samples_path"] = "~/init.npz"
    cfg = load_config(data, run_dir="~/runs/b", base_dir="~")
    assert cfg.paths.samples == str(home / "samples")
    assert cfg.paths.imports == (str(home / "code"),)
    assert cfg.buffer is not None and cfg.buffer.initial_samples_path == str(home / "init.npz")
    data = config()
    data["run_dir"] = "~/runs/c"  # a run_dir written in the config itself
    cfg = load_config(data)
    assert cfg.run_dir == str(home / "runs" / "c")
    assert cfg.paths.buffer == str(home / "runs" / "c" / "buffer")
    np.testing.assert_array_equal(load_observation("~/data/obs.npy"), [0.4, 0.6])


def test_k42_a_config_file_and_a_run_given_with_a_tilde(home):
    from kestrel.rundir._config import portable_config, run_config_yaml, save_observations

    (home / "data").mkdir()
    np.save(home / "data" / "obs.npy", np.array([0.4, 0.6]))
    (home / "m").mkdir()
    (home / "m" / "config.yml").write_text(yaml.safe_dump(config()))
    cfg = load_config("~/m/config.yml", run_dir="~/runs/a")
    assert cfg.base_dir == str(home / "m")
    run = home / "runs" / "a"
    run.mkdir(parents=True)
    (run / "config.yml").write_text(
        run_config_yaml(portable_config(cfg, run, save_observations(cfg, run)))
    )
    (run / "run.json").write_text('{"launches": []}\n')
    assert load_run_config("~/runs/a").run_dir == str(run)
    assert RunDir("~/runs/a").load_config().run_dir == str(run)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "{}\n"])
def test_k42_an_empty_config_names_its_file(tmp_path, capsys, text):
    path = tmp_path / "config.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"config file {path} is empty") and "\n" not in message
    assert "graph" in message  # what it needs
    assert main(["graph", "-c", str(path)]) == 1
    assert f"config file {path} is empty" in capsys.readouterr().err


def test_k42_the_home_folder_is_never_a_run_folder(tmp_path, monkeypatch):
    from kestrel.rundir._folder import check_launch_folder
    from kestrel_core import ConfigError

    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# hidden files only: it looks empty\n")
    monkeypatch.setenv("HOME", str(home))
    for given in ("~", str(home), f"{home}/"):
        with pytest.raises(ConfigError, match="is your home folder.*refused"):
            check_launch_folder(given)
    assert check_launch_folder("~/runs/a") == "new"  # a folder under it is fine
    with pytest.raises(ConfigError, match="file system's root"):
        check_launch_folder("/")
