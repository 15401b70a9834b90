"""``kestrel plot`` and ``kestrel export``: one sample file, central axes, names, truth, observed
data (issue 9, item 8). Rendered and checked by axis limits and labels, not pixels."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from kestrel.cli import main
from kestrel.rundir._read import latest_sample_file, read_run_samples


def _sample_file(path, **arrays):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


@pytest.fixture
def run(tmp_path):
    """A run directory as ``kestrel launch`` leaves it: config (with ``names``), observation
    with true values, and two posterior files for the run's own observation."""
    np.savez(
        tmp_path / "obs.npz",
        x=np.arange(5.0),
        z_true=np.array([0.9, 2.1]),
        unrelated_true=np.ones(2),
    )
    config = {
        "graph": {
            "z": {
                "simulator": "kestrel_core.Product",
                "evidence": ["x"],
                "estimator": "kestrel_torch.FlowPosterior",
                "names": ["beta", "gamma"],
            },
            "x": {"simulator": "m.Noise", "parents": ["z"], "observed": f"{tmp_path}/obs.npz['x']"},
        }
    }
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "run" / "run.json").write_text('{"launches": []}\n')  # a run a launch wrote
    folder = tmp_path / "run" / "samples" / "posterior" / "0123456789ab"
    rng = np.random.default_rng(0)
    # the first file is far off: a plot of the newest file must not see it
    _sample_file(folder / "000000.npz", z=rng.normal(50.0, 1.0, size=(50, 2)))
    later = _sample_file(
        folder / "000001.npz", z=rng.normal([1.0, 2.0], [0.1, 0.01], size=(4000, 2))
    )
    os.utime(later, (time.time() + 5, time.time() + 5))
    np.savez(folder / "observation.npz", x=np.arange(5.0))
    return tmp_path / "run"


def test_the_newest_file_is_read_with_its_names_observation_and_truth(run):
    path = latest_sample_file(str(run))
    assert path.endswith("000001.npz")
    samples = read_run_samples(str(run))
    assert samples.path == path and samples.arrays["z"].shape == (4000, 2)
    assert samples.names == {"z": ["beta", "gamma"]} and samples.latents == ["z"]
    assert list(samples.truth) == ["z"]  # `<node>_true` of a graph node only
    np.testing.assert_array_equal(samples.truth["z"], [0.9, 2.1])
    np.testing.assert_array_equal(samples.observed["x"], np.arange(5.0))


def test_samples_for_another_observation_carry_no_truth(run):
    folder = run / "samples" / "posterior" / "ffffffffffff"
    other = _sample_file(folder / "000000.npz", z=np.zeros((10, 2)))
    np.savez(folder / "observation.npz", x=np.full(5, 7.0))
    samples = read_run_samples(str(run), path=str(other))
    assert samples.truth == {}
    np.testing.assert_array_equal(samples.observed["x"], np.full(5, 7.0))


def test_names_that_do_not_fit_the_samples_name_node_and_key(run, capsys):
    config = yaml.safe_load((run / "config.yml").read_text())
    config["graph"]["z"]["names"] = ["beta", "gamma", "delta"]
    (run / "config.yml").write_text(yaml.safe_dump(config))
    assert main(["plot", "-o", str(run)]) == 1
    err = capsys.readouterr().err
    assert "graph.z.names: 3 names for 2 components" in err


def test_no_samples_is_an_error_naming_the_folder(run, capsys):
    assert main(["plot", "-o", str(run), "--mode", "ppd"]) == 1
    err = capsys.readouterr().err
    assert "no ppd samples" in err and str(run / "samples" / "ppd") in err


@pytest.mark.parametrize("missing", ["matplotlib", "corner"])
def test_without_the_plot_extra_one_line_says_what_to_install(run, missing):
    code = (
        f"import sys; sys.modules[{missing!r}] = None; from kestrel.cli import main; "
        f"sys.exit(main(['plot', '-o', {str(run)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("kestrel plot needs")
    assert done.stderr.strip().endswith("pip install 'kestrel[plot]'")


def _corner_available():
    pytest.importorskip("matplotlib", reason="the optional extra kestrel[plot] is missing")
    pytest.importorskip("corner", reason="the optional extra kestrel[plot] is missing")


def test_corner_axes_span_the_central_quantiles_with_names_and_contours(run):
    _corner_available()
    from kestrel.plot._plot import LEVELS, QUANTILES, corner_figure

    samples = read_run_samples(str(run))
    fig = corner_figure(samples)
    axes = np.array(fig.axes).reshape(2, 2)
    z = samples.arrays["z"]
    for j in range(2):
        want = np.quantile(z[:, j], QUANTILES)
        np.testing.assert_allclose(axes[1, j].get_xlim(), want, rtol=1e-9)
    np.testing.assert_allclose(axes[1, 0].get_ylim(), np.quantile(z[:, 1], QUANTILES))
    assert axes[1, 0].get_xlabel() == "beta" and axes[1, 1].get_xlabel() == "gamma"
    assert axes[1, 0].get_ylabel() == "gamma"
    # the 2-D panel holds filled contours at two levels (68 % and 95 %), no scatter of points
    assert len(LEVELS) == 2 and axes[1, 0].collections
    # the true values: vertical lines on the diagonal at 0.9 and 2.1
    xs = {round(float(line.get_xdata()[0]), 6) for line in axes[0, 0].lines}
    assert 0.9 in xs
    # tick labels carry the values: no offset text (2.0 ± 0.01 would otherwise read "+2")
    fig.canvas.draw()
    assert axes[1, 1].xaxis.get_offset_text().get_text() == ""
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_plot_command_writes_the_newest_file_and_a_ppd_data_plot(run, capsys):
    _corner_available()
    assert main(["plot", "-o", str(run)]) == 0
    image = run / "plots" / "posterior.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(image) in capsys.readouterr().out
    rng = np.random.default_rng(1)
    _sample_file(
        run / "samples" / "ppd" / "000000.npz",
        z=rng.normal(size=(300, 2)),
        x=rng.normal(np.arange(5.0), 1.0, size=(300, 5)),
    )
    assert main(["plot", "-o", str(run), "--mode", "ppd"]) == 0
    out = capsys.readouterr().out
    assert (run / "plots" / "ppd.png").is_file() and (run / "plots" / "ppd_x.png").is_file()
    assert "ppd_x.png" in out


def test_ppd_data_plot_marks_the_observed_data(run):
    _corner_available()
    import matplotlib.pyplot as plt

    from kestrel.plot._plot import data_figure

    rng = np.random.default_rng(1)
    path = _sample_file(
        run / "samples" / "ppd" / "000000.npz", x=rng.normal(size=(300, 5)) + np.arange(5.0)
    )
    fig = data_figure(read_run_samples(str(run), "ppd", str(path)), "x")
    ax = fig.axes[0]
    observed = [line for line in ax.lines if line.get_label() == "observed"]
    assert len(observed) == 1
    np.testing.assert_array_equal(observed[0].get_ydata(), np.arange(5.0))
    assert ax.get_xlim() == (-0.5, 4.5)
    plt.close(fig)


def test_file_picks_the_sample_file_and_an_image_name_still_works(run, capsys):
    _corner_available()
    first = run / "samples" / "posterior" / "0123456789ab" / "000000.npz"
    assert main(["plot", "-o", str(run), "--file", str(first), "--image", str(run / "a.png")]) == 0
    assert (run / "a.png").is_file()
    assert main(["plot", "-o", str(run), "--file", str(run / "b.png")]) == 0  # the old meaning
    captured = capsys.readouterr()
    assert (run / "b.png").is_file() and "use --image" in captured.err


def test_export_writes_arviz_inference_data_with_names(run, capsys):
    az = pytest.importorskip("arviz", reason="the optional extra kestrel[export] is missing")
    assert main(["export", "-o", str(run), "--format", "arviz"]) == 0
    path = run / "export" / "posterior.nc"
    assert str(path) in capsys.readouterr().out
    idata = az.from_netcdf(str(path))
    z = idata.posterior["z"]
    assert z.shape == (1, 4000, 2)
    assert list(z.coords["z_dim"].values) == ["beta", "gamma"]
    np.testing.assert_allclose(z.values[0], read_run_samples(str(run)).arrays["z"])
    np.testing.assert_array_equal(idata.observed_data["x"].values, np.arange(5.0))


def test_export_without_arviz_says_what_to_install(run):
    code = (
        "import sys; sys.modules['arviz'] = None; from kestrel.cli import main; "
        f"sys.exit(main(['export', '-o', {str(run)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "pip install 'kestrel[export]'" in done.stderr
