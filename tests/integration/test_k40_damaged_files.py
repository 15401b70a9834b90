"""K40: every file a run reads is checked where it is read.

One small real run is made once for the module (a ``kestrel launch`` subprocess); each case
copies it, damages one file (cut at half, garbage bytes, emptied) and runs the commands on it
through the ``kestrel`` entry point in this process: ``launch -o RUN --epochs 1`` (a resume),
``sample posterior``, and ``plot`` / ``export`` / ``check`` where the file is theirs. A damaged
file is one line on stderr naming the file, what is wrong and the remedy, exit status 1, and a
refused resume stops before it writes anything or starts Ray; ``status.json`` (an output) never
stops a command; a resume never starts a new seed or history, never trains 0 epochs of
``--epochs 1``.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from kestrel.cli._main import main
from kestrel.rundir._rundir import RunDir
from kestrel.rundir._runfiles import RunFileError, RunFileWarning
from kestrel.session._session import RunSession

from .helpers import example, run_kestrel, tiny

#: the bytes of a "garbage" file: the same in every run of the test
GARBAGE = np.random.default_rng(40).bytes(300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run of example 01 trained 2 epochs (seed 1), with its buffer, weights and samples."""
    run = tmp_path_factory.mktemp("k40") / "run"
    config = example("01_minimal")
    done = run_kestrel("launch", "-c", config, "-o", run, "--seed", "1", *tiny(config, epochs=2))
    assert done.returncode == 0, done.stdout + done.stderr
    return run


def damage(path: Path, how: str) -> None:
    if how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "garbage":
        path.write_bytes(GARBAGE)
    else:
        assert how == "empty"
        path.write_bytes(b"")


def contents(root: Path) -> dict[str, str]:
    """relative path → sha256 of every file under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def no_ray(monkeypatch):
    """A launch that gets as far as starting Ray fails the test: refusals come first."""

    def started(*args, **kwargs):
        raise AssertionError("Ray was started: the damaged file was not refused before")

    monkeypatch.setattr(RunSession, "ray", started)


def kestrel(capsys, *args: object) -> tuple[int, str]:
    """``kestrel ARGS`` in this process: exit status and stderr."""
    capsys.readouterr()
    status = main([str(a) for a in args])
    return status, capsys.readouterr().err


def assert_one_line(err: str, command: str, path: Path, problem: str, remedy: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"kestrel {command}: error: {path}: "), err
    assert problem in lines[0] and remedy in lines[0], err
    assert "Traceback" not in err


# (file, damage, what the error says is wrong, a word of its remedy, whether `sample` reads it)
REFUSED = [
    ("buffer/snapshots/buffer.npz", "truncated", "not a complete .npz archive", "move it", False),
    ("buffer/snapshots/buffer.npz", "garbage", "not a numpy .npz archive", "--restart", False),
    ("buffer/snapshots/buffer.npz", "empty", "the file is empty", "--restart", False),
    ("buffer/snapshots/budget.json", "garbage", "not text", "delete it", False),
    ("run.json", "empty", "the file is empty", "restore it", False),
    ("run.json", "garbage", "not text", "restore it", False),
    ("run.json", "truncated", "not valid JSON", "never resets", False),
    ("graph/z/saved.json", "garbage", "not text", "delete it to train node 'z'", False),
    ("graph/z/saved.json", "empty", "the file is empty", "--epochs N counts from it", False),
    ("config.yml", "garbage", "not text", "restore it", True),
    ("config.yml", "empty", "the file is empty", "--restart", True),
    ("observations/x.npz", "truncated", "not a complete .npz archive", "copy the obs", True),
    ("observations/x.npz", "garbage", "not a numpy .npz archive", "copy the obs", True),
]


@pytest.mark.parametrize(
    ("name", "how", "problem", "remedy", "sample_reads"),
    REFUSED,
    ids=[f"{name}-{how}" for name, how, *_ in REFUSED],
)
def test_k40_a_damaged_file_is_one_line_naming_it(
    name, how, problem, remedy, sample_reads, trained, tmp_path, capsys, no_ray
):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    damage(run / name, how)
    before = contents(run)

    status, err = kestrel(capsys, "launch", "-o", run, "--epochs", "1", "--progress", "none")
    assert status == 1, err
    assert_one_line(err, "launch", run / name, problem, remedy)
    assert contents(run) == before  # refused before anything was written (and before Ray)

    status, err = kestrel(capsys, "sample", "posterior", "-o", run, "-n", "5", "--seed", "3")
    if sample_reads:
        assert status == 1, err
        assert_one_line(err, "sample", run / name, problem, remedy)
        if name == "config.yml":
            status, err = kestrel(
                capsys, "check", "calibration", "-o", run, "-n", "4", "--no-image"
            )
            assert status == 1, err
            assert_one_line(err, "check", run / name, problem, remedy)
    else:  # sampling does not read it: it draws as usual
        assert status == 0, err
        assert len(glob.glob(str(run / "samples" / "posterior" / "*" / "000001.npz"))) == 1


@pytest.mark.parametrize(
    ("name", "how", "problem"),
    [
        ("config.yml", "garbage", "not text"),
        ("observations/x.npz", "truncated", "not a complete .npz archive"),
        ("samples/posterior/*/000000.npz", "truncated", "not a complete .npz archive"),
        ("samples/posterior/*/observation.npz", "empty", "the file is empty"),
    ],
)
def test_k40_plot_and_export_name_a_damaged_file(name, how, problem, trained, tmp_path, capsys):
    if importlib.util.find_spec("corner") is None or importlib.util.find_spec("arviz") is None:
        pytest.skip("needs kestrel[plot] and kestrel[export]")
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (path,) = [Path(p) for p in glob.glob(str(run / name))]
    damage(path, how)
    for command in ("plot", "export"):
        status, err = kestrel(capsys, command, "-o", run)
        assert status == 1, err
        assert_one_line(err, command, path, problem, "")


def test_k40_a_damaged_status_json_or_latest_never_stops_a_command(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    damage(run / "status.json", "garbage")
    damage(run / "samples" / "posterior" / "LATEST", "garbage")
    with pytest.warns(UserWarning, match=r"status\.json: ignored: it is not text"):
        assert RunDir(run).read_status() == {}
    if importlib.util.find_spec("corner") is not None:  # LATEST: the newest file is found
        status, err = kestrel(capsys, "plot", "-o", run)
        assert status == 0, err
    with warnings.catch_warnings():  # (a warning where sampling reads it: never an error)
        warnings.simplefilter("default", RunFileWarning)
        status, err = kestrel(capsys, "sample", "posterior", "-o", run, "-n", "5", "--seed", "3")
    assert status == 0, err

    # the resume goes on (a subprocess: its own Ray), keeps the run's seed and its history,
    # trains the one epoch asked for, and writes status.json anew
    done = run_kestrel("launch", "-o", run, "--epochs", "1", "--progress", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{run / 'status.json'}: ignored" in done.stderr
    launches = json.loads((run / "run.json").read_text())["launches"]
    assert [(e["mode"], e["seed"]) for e in launches] == [("new", 1), ("resume", 1)]
    assert json.loads((run / "status.json").read_text())["epochs"] == {"z": 3}


def test_k40_readers_raise_run_file_errors(trained, tmp_path):
    """The resume's readers behind the checks: ``--epochs`` never counts from a damaged
    ``saved.json`` (0 epochs), and a buffer damaged inside its arrays is named when read."""
    from kestrel.controller._resume import add_epochs, read_snapshot, saved_epoch

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    rundir = RunDir(run)
    assert saved_epoch(rundir, "z", strict=True) == 2
    damage(run / "graph" / "z" / "saved.json", "garbage")
    with pytest.raises(RunFileError, match=r"saved\.json: it is not text"):
        add_epochs(rundir.load_config(check_targets=()), rundir, 1)
    assert saved_epoch(rundir, "z") == 0  # the failure report's reading: never raises

    buffer = run / "buffer" / "snapshots" / "buffer.npz"
    with np.load(buffer) as saved:
        assert read_snapshot(rundir).n == len(saved["_ids"]) > 0
    raw = bytearray(buffer.read_bytes())
    raw[64:96] = bytes(32)  # inside the first member: its table of contents still reads
    buffer.write_bytes(bytes(raw))
    with pytest.raises(RunFileError) as caught:
        read_snapshot(rundir)
    assert str(caught.value).startswith(f"{buffer}: ") and "--restart" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_k40_a_damaged_observation_given_to_sample_is_one_line(trained, tmp_path, capsys):
    given = tmp_path / "obs.npz"
    np.savez(given, x=np.zeros(3))
    damage(given, "truncated")
    status, err = kestrel(
        capsys, "sample", "posterior", "-o", trained, "-n", "5", "--observation", f"x={given}:x"
    )
    assert status == 1, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"kestrel sample: error: --observation {given}: it is not a complete")
