"""The files ``kestrel simulate``, ``plot`` and ``export`` write, and the sample files they
read (K30): Kestrel never overwrites a file it did not write, and draws only a run's own
sample files. Without Ray."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kestrel.cli import main
from tests.core.model_folders import files, model_folder


@pytest.fixture
def run(tmp_path):
    """A run as ``kestrel launch`` and ``sample`` leave it: config.yml, run.json, one posterior
    sample file with its observation beside it."""
    root = tmp_path / "run"
    config = {
        "graph": {
            "z": {"simulator": "kestrel_core.Product", "evidence": ["x"], "estimator": "e.E"},
            "x": {"simulator": "m.Noise", "parents": ["z"]},
        }
    }
    (root / "samples" / "posterior" / "0123456789ab").mkdir(parents=True)
    (root / "config.yml").write_text(yaml.safe_dump(config))
    (root / "run.json").write_text('{"launches": []}\n')
    folder = root / "samples" / "posterior" / "0123456789ab"
    rng = np.random.default_rng(0)
    np.savez(folder / "000000.npz", z=rng.normal(size=(400, 2)))
    np.savez(folder / "observation.npz", x=np.arange(3.0))
    return root


@pytest.fixture
def model(tmp_path):
    """The user's model folder beside the run, with a notes.pdf and data/obs.npz."""
    m = model_folder(tmp_path / "m2", "ofl_model")
    (m / "notes.pdf").write_bytes(b"%PDF-1.4 the user's notes")
    np.savez(m / "data" / "obs.npz", x=np.array([0.4, 0.6]))
    return m


def _one_line_error(capsys, *names) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    for name in names:
        assert str(name) in err, err
    return err


def test_k30_export_refuses_to_overwrite_a_user_file(run, model, capsys):
    before = files(model)
    assert main(["export", "-o", str(run), "--to", str(model / "ofl_model.py")]) == 1
    err = _one_line_error(capsys, model / "ofl_model.py")
    assert "already exists" in err and "--force" in err
    assert files(model) == before


def test_k30_export_force_replaces_a_user_file(run, model, capsys):
    pytest.importorskip("arviz", reason="the optional extra kestrel[export] is missing")
    target = model / "old.nc"
    target.write_bytes(b"old")
    assert main(["export", "-o", str(run), "--to", str(target), "--force"]) == 0
    assert target.read_bytes() != b"old"


def test_k30_plot_refuses_to_overwrite_a_user_file(run, model, capsys):
    before = files(model)
    assert main(["plot", "-o", str(run), "--image", str(model / "notes.pdf")]) == 1
    err = _one_line_error(capsys, model / "notes.pdf")
    assert "already exists" in err
    assert files(model) == before


def test_k30_simulate_refuses_to_overwrite_the_configs_observation(model, capsys):
    before = files(model)
    out = model / "data" / "obs.npz"
    assert main(["simulate", "-c", str(model / "config.yml"), "-n", "5", "-o", str(out)]) == 1
    _one_line_error(capsys, out)
    assert files(model) == before
    # without the suffix: the file save_npz would write (obs.npz) is the one checked
    no_suffix = str(model / "data" / "obs")
    assert main(["simulate", "-c", str(model / "config.yml"), "-n", "5", "-o", no_suffix]) == 1
    _one_line_error(capsys, out)
    assert files(model) == before


def test_k30_simulate_refuses_a_name_with_another_suffix(model, capsys):
    """``-o x.npy`` or ``-o model.py`` wrote ``x.npy.npz`` / ``model.py.npz`` beside the
    user's files: an .npz archive is never written under another suffix."""
    before = files(model)
    for name in ("sims.npy", "model.py"):
        out = model / name
        assert main(["simulate", "-c", str(model / "config.yml"), "-n", "5", "-o", str(out)]) == 1
        _one_line_error(capsys, out, "name it " + str(model / name.split(".")[0]) + ".npz")
    assert files(model) == before


def test_k30_simulate_force_replaces_an_existing_file(tmp_path, capsys):
    from pathlib import Path

    config = Path(__file__).parents[2] / "examples" / "05_linear_regression" / "config.yml"
    out = tmp_path / "prior.npz"
    out.write_bytes(b"old")
    assert main(["simulate", "-c", str(config), "-n", "5", "-o", str(out), "--force"]) == 0
    with np.load(out) as data:
        assert data.files


def test_k30_a_folder_given_for_a_file_is_a_one_line_error(run, model, capsys, monkeypatch):
    monkeypatch.chdir(model.parent)
    before = files(model.parent)
    assert main(["plot", "-o", str(run), "--image", "m2"]) == 1
    _one_line_error(capsys, model, "is a folder")
    assert not (model.parent / "m2.png").exists()
    assert main(["export", "-o", str(run), "--to", str(model)]) == 1
    _one_line_error(capsys, model, "is a folder")
    assert main(["simulate", "-c", str(model / "config.yml"), "-n", "5", "-o", str(model)]) == 1
    _one_line_error(capsys, model, "is a folder")
    for flag in ("--to", "--image"):  # --force does not make a folder a file
        command = "export" if flag == "--to" else "plot"
        assert main([command, "-o", str(run), flag, str(model / "data"), "--force"]) == 1
        _one_line_error(capsys, model / "data", "is a folder")
    assert files(model.parent) == before


def test_k30_a_plot_name_without_a_suffix_is_reported_as_written(run, tmp_path, capsys):
    pytest.importorskip("corner", reason="the optional extra kestrel[plot] is missing")
    assert main(["plot", "-o", str(run), "--image", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig.png").is_file()
    assert f"→ {tmp_path / 'fig.png'}" in capsys.readouterr().out


def test_k30_files_inside_the_run_may_be_replaced_but_not_its_records(run, capsys):
    pytest.importorskip("arviz", reason="the optional extra kestrel[export] is missing")
    assert main(["export", "-o", str(run)]) == 0
    assert main(["export", "-o", str(run)]) == 0  # its own export, replaced
    assert main(["export", "-o", str(run), "--to", str(run / "mine.nc")]) == 0
    assert main(["export", "-o", str(run), "--to", str(run / "mine.nc")]) == 0
    capsys.readouterr()
    config = (run / "config.yml").read_bytes()
    assert main(["export", "-o", str(run), "--to", str(run / "config.yml")]) == 1
    _one_line_error(capsys, run / "config.yml", "the run's own config.yml")
    sample = run / "samples" / "posterior" / "0123456789ab" / "000000.npz"
    assert main(["export", "-o", str(run), "--to", str(sample)]) == 1
    _one_line_error(capsys, sample, "sample files")
    assert (run / "config.yml").read_bytes() == config


def test_k30_plot_file_must_be_one_of_the_runs_sample_files(run, model, tmp_path, capsys):
    other = tmp_path / "other_run" / "samples" / "posterior" / "0123456789ab" / "000000.npz"
    other.parent.mkdir(parents=True)
    np.savez(other, z=np.zeros((10, 2)))
    prior = run / "samples" / "prior" / "000000.npz"
    prior.parent.mkdir(parents=True)
    np.savez(prior, z=np.zeros((10, 2)))
    refused = [
        run / "samples" / "posterior" / "0123456789ab" / "observation.npz",
        model / "data" / "obs.npz",
        other,
        prior,
    ]
    for path in refused:
        for command in ("plot", "export"):
            assert main([command, "-o", str(run), "--file", str(path)]) == 1
            _one_line_error(capsys, path, "--file")
    assert not (run / "plots").exists() and not (run / "export").exists()


def test_k30_export_file_observation_is_refused_not_a_key_error(run, capsys):
    observation = run / "samples" / "posterior" / "0123456789ab" / "observation.npz"
    assert main(["export", "-o", str(run), "--file", str(observation)]) == 1
    err = _one_line_error(capsys, observation)
    assert "KeyError" not in err and "not one of this run's posterior sample files" in err


def test_k30_plot_and_export_on_a_model_folder_say_not_a_run(model, capsys):
    before = files(model)
    for command in ("plot", "export"):
        assert main([command, "-o", str(model)]) == 1
        err = _one_line_error(capsys, model, "is not a run directory")
        assert "no posterior samples" not in err and "kestrel launch -c" in err
    assert files(model) == before
