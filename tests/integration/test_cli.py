"""``kestrel launch`` / ``sample`` / ``plot`` as a user runs them: separate processes (K14, K16, K17)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import numpy as np
import pytest

from kestrel import RunDir
from kestrel_core import load_config

from .helpers import KESTREL, REPO, example, kestrel_env, run_kestrel, tiny

FOREVER = ["graph.z.estimator.max_epochs=1000000", "graph.z.estimator.early_stop_patience=1000000"]


def epochs_logged(run) -> int:
    """The last epoch in ``graph/z/metrics.csv`` (0 before the first)."""
    try:
        rows = (run / "graph" / "z" / "metrics.csv").read_text().splitlines()[1:]
    except FileNotFoundError:
        return 0
    return int(rows[-1].split(",")[0]) if rows else 0


def start_launch(run, *overrides: str) -> subprocess.Popen:
    config = example("01_minimal")
    args = [
        *KESTREL,
        "launch",
        "-c",
        str(config),
        "-o",
        str(run),
        "--seed",
        "3",
        *tiny(config),
        *overrides,
    ]
    return subprocess.Popen(
        args,
        cwd=str(REPO),
        env=kestrel_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_epoch(proc: subprocess.Popen, run, epoch: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while epochs_logged(run) < epoch:
        if proc.poll() is not None:
            pytest.fail(f"kestrel launch ended early ({proc.returncode}):\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no epoch {epoch} within {timeout} s")
        time.sleep(0.2)


def test_k14_launch_sample_on_cpu_resume_and_ctrl_c(tmp_path):
    run = tmp_path / "run"
    config = example("01_minimal")
    done = run_kestrel("launch", "-c", config, "-o", run, "--seed", "1", *tiny(config, epochs=3))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed" in done.stdout and json.loads((run / "status.json").read_text())[
        "epochs"
    ] == {"z": 3}

    # a new process without CUDA loads the weights and samples the posterior
    sampled = run_kestrel(
        "sample",
        "posterior",
        "-o",
        run,
        "-n",
        "11",
        "--seed",
        "2",
        env=kestrel_env(CUDA_VISIBLE_DEVICES=""),
    )
    assert sampled.returncode == 0, sampled.stdout + sampled.stderr
    with np.load(next((run / "samples" / "posterior").glob("*/000001.npz"))) as data:
        assert data["z"].shape == (11, 3)

    # resume (--resume: the run's config.yml plus the overrides) and stop it with Ctrl-C
    proc = start_launch(run, "--resume", *FOREVER)
    wait_for_epoch(proc, run, 5)  # the counter continues after 3
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out  # interrupted: the shell's exit status for SIGINT
    assert "continuing with its config.yml" in out and "loaded saved weights" in out
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "interrupted" and status["resumed"] == ["z"]
    assert status["epochs"]["z"] >= 5
    saved = json.loads((run / "graph" / "z" / "saved.json").read_text())
    # Ctrl-C wrote a checkpoint (unless no epoch beat the saved best model, K31) and the buffer
    assert saved["epoch"] == status["epochs"]["z"] or "weights kept" in out
    assert (run / "buffer" / "snapshots" / "buffer.npz").is_file()
    assert any((run / "samples" / "posterior").glob("*/000002.npz"))  # and sampled

    plotted = run_kestrel("plot", "-o", run)
    assert plotted.returncode == 0, plotted.stderr
    assert (run / "plots" / "posterior.png").stat().st_size > 0


def test_a_second_ctrl_c_aborts(tmp_path):
    run = tmp_path / "run"
    # many posterior samples: the graceful stop lasts long enough for a second Ctrl-C
    proc = start_launch(run, *FOREVER, "sample.posterior.n=400000")
    wait_for_epoch(proc, run, 1)
    proc.send_signal(signal.SIGINT)
    lines = []
    for line in proc.stdout:  # signals sent too close together reach Python as one
        lines.append(line)
        if "stopping gracefully" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines) + out
    assert "interrupted" in out
    assert json.loads((run / "status.json").read_text())["status"] == "aborted"
    assert not (run / "samples" / "posterior").exists()


def test_a_stop_before_the_first_epoch_skips_sampling_in_one_line(tmp_path):
    # --timeout stops like the first Ctrl-C; 0.5 s ends it before any epoch
    run = tmp_path / "run"
    config = example("01_minimal")
    done = run_kestrel("launch", "-c", config, "-o", run, "--timeout", "0.5", *tiny(config))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "sampling: skipped; no trained model yet for 'z'" in out
    assert "Unhandled error" not in out and "Traceback" not in out
    assert json.loads((run / "status.json").read_text())["status"] == "timeout"
    assert not (run / "samples" / "posterior").exists()


def test_k16_cli_gpu_request_fails_with_the_node_and_counts(tmp_path):
    config = example("01_minimal")
    done = run_kestrel(
        "launch",
        "-c",
        config,
        "-o",
        tmp_path / "run",
        *tiny(config),
        "graph.x.ray.num_gpus=2",
        timeout=120,
    )
    assert done.returncode == 1
    assert "node 'x' requests 2 GPUs; the cluster has 0" in done.stderr


@pytest.mark.parametrize(
    "override, expected",
    [
        ("buffer.max_sample=1000", "did you mean 'max_samples'"),
        ("graph.z.estimator.num_epochs=10", "did you mean 'max_epochs'"),
        ("ray.num_gpu=1", "did you mean 'num_gpus'"),
        ("graph.x.simulator.sigmaa=0.1", "did you mean 'sigma'"),
        (
            "graph.z.estimator.embedding={_target_: kestrel_torch.embeddings.SignalProjection, "
            "n_component: 3}",
            "graph.z.estimator.embedding.n_component: unexpected argument (did you mean",
        ),
        (
            "graph.z.estimator.embedding={_target_: kestrel_torch.embeddings.Flatten, _input_: y}",
            "graph.z.estimator.embedding._input_[0]: 'y' is neither evidence nor a scaffold",
        ),
    ],
)
def test_k17_cli_config_errors_before_ray(override, expected, tmp_path):
    done = run_kestrel(
        "launch", "-c", example("01_minimal"), "-o", tmp_path / "run", override, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.startswith("kestrel launch: error:") and expected in done.stderr
    assert "ray:" not in done.stdout  # Ray never started
    assert not (tmp_path / "run" / "config.yml").exists()


def test_k17_cli_sample_without_n_is_an_error_before_ray(tmp_path):
    run = RunDir(tmp_path / "run")
    run.write_config(load_config(example("01_minimal"), ["sample={}"], run_dir=run.root))
    done = run_kestrel("sample", "posterior", "-o", run.root, timeout=60)
    assert done.returncode == 1 and "sample.posterior.n" in done.stderr


def test_cli_sample_of_a_directory_that_is_not_a_run(tmp_path):
    done = run_kestrel("sample", "prior", "-o", tmp_path, "-n", "3", timeout=60)
    assert done.returncode == 1 and "not a run directory" in done.stderr
