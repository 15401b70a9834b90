"""``kestrel plot``: a corner plot of a run's samples; matplotlib is an optional extra."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import yaml

from kestrel_core._cli import main
from kestrel_core._plot import read_samples, read_truth


@pytest.fixture
def run(tmp_path):
    """A run directory as ``kestrel launch`` leaves it (config, observation, two sample files)."""
    np.savez(
        tmp_path / "obs.npz",
        x=np.array([1.0, 2.0]),
        z_true=np.array([0.9, 2.1]),
        unrelated_true=np.ones(2),
    )
    config = {
        "graph": {
            "z": {"simulator": "kestrel_core.Product", "evidence": ["x"]},
            "x": {"simulator": "m.Noise", "parents": ["z"], "observed": f"{tmp_path}/obs.npz['x']"},
        }
    }
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yml").write_text(yaml.safe_dump(config))
    folder = tmp_path / "run" / "samples" / "posterior"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(folder / "000000.npz", z=rng.normal(size=(50, 2)))
    np.savez(folder / "000001.npz", z=rng.normal(size=(30, 2)))
    return tmp_path / "run"


def test_samples_of_all_files_and_the_truth_are_read(run):
    samples = read_samples(str(run))
    assert samples["z"].shape == (80, 2)
    truth = read_truth(str(run))
    assert list(truth) == ["z"]  # `<node>_true` of a graph node only
    np.testing.assert_array_equal(truth["z"], [0.9, 2.1])


def test_no_samples_is_an_error_naming_the_folder(run, capsys):
    assert main(["plot", "-o", str(run), "--mode", "ppd"]) == 1
    err = capsys.readouterr().err
    assert "no ppd samples" in err and str(run / "samples" / "ppd") in err


def test_without_matplotlib_one_line_says_what_to_install(run):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from kestrel_core._cli import main; "
        f"sys.exit(main(['plot', '-o', {str(run)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "kestrel plot needs matplotlib: pip install 'kestrel-core[plot]'"


def test_corner_plot_is_written(run, capsys):
    pytest.importorskip(
        "matplotlib", reason="the optional extra kestrel-core[plot] is not installed here"
    )
    assert main(["plot", "-o", str(run)]) == 0
    image = run / "plots" / "posterior.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(image) in capsys.readouterr().out
