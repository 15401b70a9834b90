"""The kestrel command: graph, simulate, the layer sub-commands, error handling."""

import hashlib
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import kestrel.cli._main as _cli
from kestrel.cli import main
from kestrel.cli._arguments import add_config_arguments
from kestrel_core import load_config
from tests.core.test_config import write_run

ROOT = Path(__file__).resolve().parents[2]
#: every config file of the examples (``config.yml`` and variants such as ``amortized.yml``)
EXAMPLE_CONFIGS = sorted((ROOT / "examples").glob("*/*.yml"))


@pytest.fixture
def no_layers(monkeypatch):
    """As in an install without kestrel-ray and kestrel-torch."""
    monkeypatch.setattr(_cli, "layer_installed", lambda module: False)


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_graph_prints_the_description(tmp_path, capsys, no_layers):
    config = write_run(tmp_path)
    assert main(["graph", "-c", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == load_config(config).graph.describe()
    assert "Nodes: 3 | Observed: x | Estimators: none" in out


def test_simulate_writes_one_array_per_node(tmp_path, capsys, no_layers):
    config = write_run(tmp_path)
    out_path = tmp_path / "out" / "prior.npz"
    assert main(["simulate", "-c", str(config), "-n", "6", "-o", str(out_path), "--seed", "4"]) == 0
    line = capsys.readouterr().out.strip()
    assert (
        line.count("\n") == 0 and "6 samples" in line and "seed 4" in line and str(out_path) in line
    )
    with np.load(out_path) as data:
        assert data.files == ["theta", "mu", "x"]
        assert data["theta"].shape == data["mu"].shape == data["x"].shape == (6, 2)


def test_simulate_same_seed_gives_identical_files(tmp_path, no_layers, capsys):
    config = write_run(tmp_path)
    paths = [tmp_path / f"{name}.npz" for name in ("a", "b", "c")]
    for path, seed in zip(paths, ("1", "1", "2")):
        assert (
            main(["simulate", "-c", str(config), "-n", "5", "-o", str(path), "--seed", seed]) == 0
        )
    assert digest(paths[0]) == digest(paths[1]) != digest(paths[2])


def test_simulate_without_seed_prints_the_entropy_that_reproduces_it(tmp_path, no_layers, capsys):
    config = write_run(tmp_path)
    main(["simulate", "-c", str(config), "-n", "3", "-o", str(tmp_path / "a.npz")])
    seed = capsys.readouterr().out.split("(seed ")[1].split(")")[0]
    main(["simulate", "-c", str(config), "-n", "3", "-o", str(tmp_path / "b.npz"), "--seed", seed])
    assert digest(tmp_path / "a.npz") == digest(tmp_path / "b.npz")


def test_overrides_anywhere_on_the_command_line(tmp_path, no_layers, capsys):
    config = write_run(tmp_path)
    out = tmp_path / "o.npz"
    argv = [
        "simulate",
        "graph.mu.simulator.offset=100.0",
        "-c",
        str(config),
        "-n",
        "4",
        "-o",
        str(out),
        "graph.x.simulator.sigma=0.0",
    ]
    assert main(argv) == 0
    with np.load(out) as data:
        np.testing.assert_array_equal(data["x"], data["theta"] + 100.0)


def test_user_errors_print_one_message_and_exit_1(tmp_path, capsys, no_layers):
    config = write_run(tmp_path)
    assert (
        main(
            [
                "simulate",
                "-c",
                str(config),
                "-n",
                "2",
                "-o",
                str(tmp_path / "o.npz"),
                "graph.x.simulator.sigmaa=1",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "kestrel simulate: error: graph.x.simulator.sigmaa: unexpected argument "
        "(did you mean 'sigma'?)\n"
    )
    assert main(["graph", "-c", str(tmp_path / "missing.yml")]) == 1
    assert "config file not found" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path, monkeypatch, no_layers):
    config = write_run(tmp_path)
    with pytest.raises(Exception, match="sigmaa"):
        main(["--debug", "graph", "-c", str(config), "graph.x.simulator.sigmaa=1"])
    monkeypatch.setenv("KESTREL_DEBUG", "1")
    with pytest.raises(Exception, match="sigmaa"):
        main(["graph", "-c", str(config), "graph.x.simulator.sigmaa=1"])


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "-n", "0", "-o", "x.npz"],
        ["simulate", "-n", "2"],
        ["graph", "--bogus"],
        ["graph", "positional"],
        [],
    ],
)
def test_usage_errors_exit_2(argv, capsys, no_layers):
    assert main(argv) == 2
    assert capsys.readouterr().err


@pytest.mark.parametrize("command", ["launch", "sample"])
def test_layer_command_without_its_package(command, capsys, no_layers):
    assert main([command, "-c", "config.yml", "posterior"]) == 2
    captured = capsys.readouterr()
    assert (
        captured.err
        == f"kestrel {command} needs the kestrel-ray package: pip install kestrel-ray\n"
    )


def test_help_lists_the_layer_commands(capsys, no_layers):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "graph" in out and "simulate" in out and "needs kestrel-ray" in out


def test_layer_commands_register_sub_commands(monkeypatch, capsys):
    seen = {}

    def register(subparsers):
        p = subparsers.add_parser("launch", help="train")
        add_config_arguments(p)
        p.add_argument("--timeout", type=float)
        p.set_defaults(func=lambda args: seen.update(vars(args)) or 3)

    fake = types.ModuleType("fake_commands")
    fake.launch_command = register
    monkeypatch.setitem(sys.modules, "fake_commands", fake)
    monkeypatch.setitem(
        _cli.LAYER_COMMANDS, "launch", ("fake_commands", "launch_command", ("kestrel_ray",))
    )
    monkeypatch.setitem(
        _cli.LAYER_COMMANDS, "sample", ("fake_commands", "sample_command", ("no_such_layer",))
    )
    assert main(["launch", "-c", "my.yml", "--timeout", "5", "buffer.min_samples=2"]) == 3
    assert (
        seen["config"] == "my.yml"
        and seen["timeout"] == 5.0
        and seen["overrides"] == ["buffer.min_samples=2"]
    )
    assert main(["--help"]) == 0
    assert "needs no-such-layer" in capsys.readouterr().out  # sample's layer is missing


def test_a_broken_command_only_breaks_itself(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(
        _cli.LAYER_COMMANDS, "launch", ("no_such_module_here", "launch_command", ())
    )
    assert main(["launch"]) == 2
    assert (
        "kestrel launch: the command failed to load (no_such_module_here:launch_command): "
        "ModuleNotFoundError: No module named 'no_such_module_here'" in capsys.readouterr().err
    )
    assert main(["graph", "-c", str(write_run(tmp_path))]) == 0


def test_console_entry_point_runs_without_traceback(tmp_path):
    config = write_run(tmp_path)
    ok = subprocess.run(
        [sys.executable, "-m", "kestrel", "graph", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and "Nodes: 3" in ok.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kestrel",
            "graph",
            "-c",
            str(config),
            "buffer.max_sample=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == (
        "kestrel graph: error: override 'buffer.max_sample=1': buffer.max_sample: "
        "unknown key 'max_sample' (did you mean 'max_samples'?)"
    )


# --- the examples -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config", EXAMPLE_CONFIGS, ids=[f"{p.parent.name}/{p.name}" for p in EXAMPLE_CONFIGS]
)
def test_every_example_config_loads_and_simulates(config, tmp_path, capsys, no_layers):
    assert main(["graph", "-c", str(config)]) == 0
    assert (
        main(
            ["simulate", "-c", str(config), "-n", "3", "-o", str(tmp_path / "s.npz"), "--seed", "0"]
        )
        == 0
    )
    cfg = load_config(config)
    with np.load(tmp_path / "s.npz") as data:
        assert data.files == list(cfg.graph.nodes)
        for name, obs in cfg.graph.observations.items():
            assert data[name].shape == (3, *obs.shape)


def test_example05_prior_simulation(tmp_path, capsys, no_layers):
    config = ROOT / "examples" / "05_linear_regression" / "config.yml"
    files = [tmp_path / "p1.npz", tmp_path / "p2.npz"]
    for path in files:
        assert (
            main(["simulate", "-c", str(config), "-n", "1000", "-o", str(path), "--seed", "0"]) == 0
        )
    with np.load(files[0]) as data:
        assert {k: data[k].shape for k in data.files} == {
            "theta": (1000, 10),
            "mu": (1000, 1000),
            "x": (1000, 1000),
        }
    assert digest(files[0]) == digest(files[1])
