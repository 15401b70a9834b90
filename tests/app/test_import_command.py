"""``kestrel import`` (issue 32 item 2): simulations made elsewhere as a new run's initial rows.

Without Ray: every refusal is one line naming the node and the file (a node missing, another
per-row shape, rows outside the prior's support, NaN, unequal row counts, a launched run) and
writes nothing; shards of a folder and ``FILE.npz:key`` are read; a second import adds a file;
the run's lock and the K41 trust model apply; importing loads neither Ray nor PyTorch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from kestrel import import_simulations
from kestrel.cli import main
from kestrel.importing._layout import holds_imported_rows
from kestrel.rundir._lock import RunLock, RunLockedError
from kestrel.rundir._rundir import RunDir
from kestrel_core import ConfigError

MODELS = "kestrel_core.testing.models"
N = 50


def write_config(tmp_path, **buffer) -> str:
    """z ~ U(-1, 1)², x = z + 0.1·noise observed at (0.3, -0.2); a Gaussian estimator."""
    np.save(tmp_path / "obs.npy", np.array([0.3, -0.2]))
    cfg = {
        "buffer": {"min_samples": 64, "max_samples": 256, "validation_samples": 16, **buffer},
        "budget": {"simulations": 100},
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -1.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2},
            },
            "x": {
                "simulator": {"_target_": f"{MODELS}.Noise", "sigma": 0.1},
                "parents": ["z"],
                "observed": "obs.npy",
            },
        },
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def rows(seed=0, n=N):
    rng = np.random.default_rng(seed)
    z = rng.uniform(-1, 1, size=(n, 2))
    return z, z + 0.1 * rng.standard_normal(z.shape)


@pytest.fixture
def files(tmp_path):
    z, x = rows()
    np.save(tmp_path / "theta.npy", z)
    np.save(tmp_path / "x.npy", x)
    return tmp_path


def kestrel(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys, tmp_path, *pairs) -> str:
    """``kestrel import`` refused with one line; nothing written; returns the line."""
    run = tmp_path / "run"
    status, _, err = kestrel(capsys, "import", "-c", tmp_path / "config.yml", "-o", run, *pairs)
    assert status == 1
    assert not run.exists()  # nothing written: not even the folder the lock made
    line = err.strip()
    assert line.startswith("kestrel import: error: ") and "\n" not in line, err
    assert "nothing was imported" in line
    return line


def test_import_writes_a_new_run_that_a_launch_starts_from(tmp_path, files, capsys, monkeypatch):
    config = write_config(tmp_path)
    run = tmp_path / "run"
    monkeypatch.chdir(tmp_path)  # relative files: against the working directory
    status, out, _ = kestrel(capsys, "import", "-c", config, "-o", run, "z=theta.npy", "x=x.npy")
    assert status == 0
    assert f"kestrel import: {N} rows → {run / 'import' / '000001.npz'}" in out
    assert "simulates 30 more from the prior first" in out  # 64 + 16 - 50
    assert "budget.simulations = 100: the imported rows count 50 of it" in out
    with np.load(run / "import" / "000001.npz") as data:
        np.testing.assert_array_equal(data["z"], np.load(files / "theta.npy"))
        np.testing.assert_array_equal(data["x"], np.load(files / "x.npy"))
    # a run as a launch writes it, never launched; its config names the folder relative to it
    text = (run / "config.yml").read_text()
    assert (
        "initial_samples_path: import\n" in text and str(tmp_path) not in text.split("imports")[0]
    )
    assert json.loads((run / "run.json").read_text()) == {"launches": []}
    assert (run / "observations" / "x.npy").is_file()
    record = json.loads((run / "import" / "imports.json").read_text())["imports"]
    assert record[0]["rows"] == N and record[0]["sources"]["z"]["given"] == "theta.npy"
    assert not (run / ".kestrel.lock").exists()  # the lock released
    # relocatable: a moved run finds its rows where it is now
    moved = tmp_path / "moved"
    shutil.move(str(run), moved)
    cfg = RunDir(moved).load_config()
    assert cfg.buffer.initial_samples_path == str(moved / "import")
    assert holds_imported_rows(moved, cfg.buffer.initial_samples_path)
    assert not holds_imported_rows(moved, str(files / "theta.npy"))


def test_missing_node_names_it_and_what_was_given(tmp_path, files, capsys):
    write_config(tmp_path)
    line = refused(capsys, tmp_path, f"z={files / 'theta.npy'}")
    assert "node 'x': no array given (given: z=" in line and "theta.npy" in line
    assert "add x=FILE" in line


def test_unknown_node_is_refused(tmp_path, files, capsys):
    write_config(tmp_path)
    status, _, err = kestrel(
        capsys, "import", "-c", tmp_path / "config.yml", "-o", tmp_path / "run",
        f"z={files / 'theta.npy'}", f"x={files / 'x.npy'}", f"y={files / 'x.npy'}",
    )  # fmt: skip
    assert status == 1 and "'y' is not a node of the graph (its nodes: z, x)" in err


def test_wrong_shape_names_node_file_and_both_shapes(tmp_path, files, capsys):
    write_config(tmp_path)
    np.save(tmp_path / "x3.npy", np.zeros((N, 3)))
    line = refused(capsys, tmp_path, f"z={files / 'theta.npy'}", f"x={tmp_path / 'x3.npy'}")
    assert "node 'x' (" in line and "x3.npy): rows of shape (3,)" in line
    assert "expected (2,) per row, fixed by its observation" in line


def test_flat_rows_of_a_vector_node_get_a_reshape_hint(tmp_path, files, capsys):
    write_config(tmp_path)
    np.save(tmp_path / "flat.npy", np.zeros((N, 2, 1)))
    line = refused(capsys, tmp_path, f"z={files / 'theta.npy'}", f"x={tmp_path / 'flat.npy'}")
    assert "rows of shape (2, 1)" in line and "reshape it to (n, 2)" in line


def test_rows_outside_the_prior_support_are_counted_with_the_first_row(tmp_path, files, capsys):
    write_config(tmp_path)
    z = np.load(files / "theta.npy")
    z[[7, 20, 31], 1] = 1.5
    np.save(tmp_path / "wide.npy", z)
    line = refused(capsys, tmp_path, f"z={tmp_path / 'wide.npy'}", f"x={files / 'x.npy'}")
    assert "node 'z' (" in line and "wide.npy)" in line
    assert "3 rows (the first: row 7) lie outside the support of its prior" in line


def test_nan_rows_are_counted_with_the_first_row(tmp_path, files, capsys):
    write_config(tmp_path)
    x = np.load(files / "x.npy")
    x[12, 0] = np.nan
    np.save(tmp_path / "nan.npy", x)
    line = refused(capsys, tmp_path, f"z={files / 'theta.npy'}", f"x={tmp_path / 'nan.npy'}")
    assert "node 'x' (" in line and "nan.npy): 1 row (row 12) holds NaN or ±inf" in line


def test_unequal_lengths_name_every_node_and_file(tmp_path, files, capsys):
    write_config(tmp_path)
    np.save(tmp_path / "short.npy", np.load(files / "x.npy")[:-1])
    line = refused(capsys, tmp_path, f"z={files / 'theta.npy'}", f"x={tmp_path / 'short.npy'}")
    assert "different numbers of rows: z 50 (" in line and "x 49 (" in line
    assert "short.npy" in line and "theta.npy" in line


def test_several_problems_one_line_each(tmp_path, files, capsys):
    write_config(tmp_path)
    np.save(tmp_path / "x3.npy", np.zeros((N, 3)))
    status, _, err = kestrel(
        capsys, "import", "-c", tmp_path / "config.yml", "-o", tmp_path / "run",
        f"z={tmp_path / 'nope.npy'}", f"x={tmp_path / 'x3.npy'}",
    )  # fmt: skip
    assert status == 1 and not (tmp_path / "run").exists()
    lines = err.strip().splitlines()
    assert "2 problems with the rows given; nothing was imported" in lines[0]
    assert lines[1].strip().startswith("node 'z' (") and "does not exist" in lines[1]
    assert lines[2].strip().startswith("node 'x' (") and "rows of shape (3,)" in lines[2]


def test_a_damaged_file_is_one_line(tmp_path, files, capsys):
    write_config(tmp_path)
    (tmp_path / "cut.npy").write_bytes((files / "x.npy").read_bytes()[:100])
    line = refused(capsys, tmp_path, f"z={files / 'theta.npy'}", f"x={tmp_path / 'cut.npy'}")
    assert "node 'x' (" in line and "cut.npy" in line


def test_a_folder_of_shards_and_npz_keys(tmp_path, capsys):
    config = write_config(tmp_path)
    z, x = rows(1, 30)
    (tmp_path / "zs").mkdir()
    (tmp_path / "xs").mkdir()
    for i, (a, b) in enumerate([(0, 10), (10, 25), (25, 30)]):  # name order, not write order
        np.save(tmp_path / "zs" / f"part{2 - i}.npy", z[a:b])
        np.savez(tmp_path / "xs" / f"part{2 - i}.npz", x=x[a:b], other=np.zeros(b - a))
    run = tmp_path / "run"
    status, out, _ = kestrel(
        capsys, "import", "-c", config, "-o", run, f"z={tmp_path / 'zs'}", f"x={tmp_path / 'xs'}"
    )
    assert status == 0, out
    order = np.concatenate([z[25:30], z[10:25], z[0:10]])  # part0, part1, part2
    xorder = np.concatenate([x[25:30], x[10:25], x[0:10]])
    with np.load(run / "import" / "000001.npz") as data:
        np.testing.assert_array_equal(data["z"], order)
        np.testing.assert_array_equal(data["x"], xorder)
    # .npz:key, into the same run (never launched): another file; the run's own config
    np.savez(tmp_path / "sims.npz", theta=z, obs=x)
    status, out, _ = kestrel(
        capsys, "import", "-o", run, f"z={tmp_path / 'sims.npz'}:theta",
        f"x={tmp_path / 'sims.npz'}:obs",
    )  # fmt: skip
    assert status == 0 and "the run holds 60 imported rows" in out
    with np.load(run / "import" / "000002.npz") as data:
        np.testing.assert_array_equal(data["z"], z)
    record = json.loads((run / "import" / "imports.json").read_text())["imports"]
    assert [e["file"] for e in record] == ["000001.npz", "000002.npz"]
    assert len(record[0]["sources"]["z"]["files"]) == 3


def test_an_npz_without_the_key_lists_its_arrays(tmp_path, files, capsys):
    write_config(tmp_path)
    np.savez(tmp_path / "two.npz", a=np.zeros((N, 2)), b=np.zeros((N, 2)))
    line = refused(capsys, tmp_path, f"z={tmp_path / 'two.npz'}", f"x={files / 'x.npy'}")
    assert "holds 2 arrays (a, b) and none is named 'z'" in line
    line = refused(capsys, tmp_path, f"z={tmp_path / 'two.npz'}:c", f"x={files / 'x.npy'}")
    assert "has no array 'c' (it holds a, b)" in line


def test_integer_rows_become_the_simulators_floats(tmp_path):
    config = write_config(tmp_path)
    z = np.zeros((N, 2), dtype=np.int64)
    x = np.ones((N, 2), dtype=np.int32)
    result = import_simulations(config, tmp_path / "run", {"z": z, "x": x})
    with np.load(result.path) as data:
        assert data["z"].dtype == np.float64 and data["x"].dtype == np.float64


def test_a_launched_run_is_refused_with_the_remedy(tmp_path, files, capsys):
    config = write_config(tmp_path)
    run = tmp_path / "run"
    import_simulations(config, run, {"z": str(files / "theta.npy"), "x": str(files / "x.npy")})
    history = {"launches": [{"launch": 1, "mode": "resume", "status": "completed"}]}
    (run / "run.json").write_text(json.dumps(history))
    before = sorted(os.listdir(run / "import"))
    status, _, err = kestrel(
        capsys, "import", "-o", run, f"z={files / 'theta.npy'}", f"x={files / 'x.npy'}"
    )
    line = err.strip()
    assert status == 1 and "\n" not in line
    assert f"{run} was launched (1 launch in run.json)" in line
    assert f"kestrel import -c CONFIG -o {run}-imported" in line
    assert f"kestrel launch -o {run}-imported" in line
    assert sorted(os.listdir(run / "import")) == before


def test_a_different_config_for_an_imported_run_is_refused(tmp_path, files):
    config = write_config(tmp_path)
    run = tmp_path / "run"
    given = {"z": str(files / "theta.npy"), "x": str(files / "x.npy")}
    import_simulations(config, run, given)
    import_simulations(config, run, given)  # the same config: another file
    with pytest.raises(ConfigError, match=r"1 key differs.*buffer\.min_samples: 64 → 32"):
        import_simulations(config, run, given, overrides=["buffer.min_samples=32"])
    assert sorted(os.listdir(run / "import")) == ["000001.npz", "000002.npz", "imports.json"]


def test_a_new_run_needs_a_config_a_buffer_and_its_own_initial_rows(tmp_path, files):
    config = write_config(tmp_path, initial_samples_path="elsewhere.npz")
    given = {"z": str(files / "theta.npy"), "x": str(files / "x.npy")}
    with pytest.raises(ConfigError, match="is a new run: give its config"):
        import_simulations(None, tmp_path / "run", given)
    with pytest.raises(ConfigError, match=r"buffer\.initial_samples_path: the config starts from"):
        import_simulations(config, tmp_path / "run", given)
    assert not (tmp_path / "run").exists()


def test_the_run_lock_is_taken(tmp_path, files):
    config = write_config(tmp_path)
    run = tmp_path / "run"
    given = {"z": str(files / "theta.npy"), "x": str(files / "x.npy")}
    with RunLock(run):  # a launch holds the run
        with pytest.raises(RunLockedError, match="is being written by another launch"):
            import_simulations(config, run, given)
        assert sorted(os.listdir(run)) == [".kestrel.lock"]


def test_k41_an_imported_runs_config_edited_by_someone_else_is_refused(
    tmp_path, files, capsys, monkeypatch
):
    config = write_config(tmp_path)
    run = tmp_path / "run"
    given = {"z": str(files / "theta.npy"), "x": str(files / "x.npy")}
    import_simulations(config, run, given)
    data = yaml.safe_load((run / "config.yml").read_text())
    data["graph"]["x"]["simulator"] = {"_target_": "os.system", "command": "touch PWNED"}
    (run / "config.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    status, _, err = kestrel(
        capsys, "import", "-o", run, f"z={files / 'theta.npy'}", f"x={files / 'x.npy'}"
    )
    assert status == 1 and "refused" in err and "'os.system'" in err and "--trust" in err
    assert not (tmp_path / "PWNED").exists()
    assert sorted(os.listdir(run / "import")) == ["000001.npz", "imports.json"]


def test_import_loads_neither_ray_nor_torch(tmp_path, files):
    config = write_config(tmp_path)
    code = (
        "import sys\nfrom kestrel.cli import main\n"
        f"status = main(['import', '-c', {config!r}, '-o', {str(tmp_path / 'run')!r}, "
        f"'z={files / 'theta.npy'}', 'x={files / 'x.npy'}'])\n"
        "print(status, sorted(m for m in ('ray', 'torch', 'kestrel_ray', 'kestrel_torch') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 []"
