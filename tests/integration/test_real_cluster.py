"""Kestrel on a real multi-machine Ray cluster: ``ray start`` head + a worker that sees other disks.

The worker node runs in its own mount namespace with a tmpfs over the example folder and over
the run directory's parent (:mod:`tests.integration.real_cluster`): what a second machine sees.
Every node of example 05 is pinned to it by a custom resource, so the user's code must travel
with Ray's runtime environment, and every file of the run must reach the driver, which writes
the run directory. The cluster uses token authentication; the driver is given the token file
but not ``RAY_AUTH_MODE``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from .helpers import EXAMPLES, KESTREL, tiny
from .real_cluster import RAY, RealCluster, unshare_works

pytestmark = [
    pytest.mark.skipif(
        not unshare_works(),
        reason="needs `unshare --mount` and tmpfs mounts "
        "(root, or unprivileged user namespaces) to hide folders from the worker",
    ),
    pytest.mark.timeout(900),
]

NODES = ("theta", "mu", "x")
#: every node of example 05 on the worker node, the only one offering ``kestrel_worker``
PINNED = [f"graph.{name}.ray.resources.kestrel_worker=1" for name in NODES]


@pytest.fixture(scope="module")
def cluster():
    """``(cluster, example folder, runs folder)``; the worker sees neither folder's files."""
    base = Path(tempfile.mkdtemp(prefix="kestrel-rc-"))
    example = base / "example"
    shutil.copytree(
        EXAMPLES / "05_linear_regression",
        example,
        ignore=shutil.ignore_patterns("runs", "__pycache__"),
    )
    runs = base / "runs"
    runs.mkdir()
    # the driver runs from a folder with a model.py of its own, as a user's shell often is:
    # the nodes must still import the config's model.py (the shipped copy) on the worker
    (base / "elsewhere").mkdir()
    (base / "elsewhere" / "model.py").write_text('"""Another project\'s model: no Signal."""\n')
    try:
        with RealCluster(
            [example, runs], {"kestrel_worker": 100}, worker_cpus=2, dashboard=True
        ) as rc:
            yield rc, example, runs
    finally:
        shutil.rmtree(base, ignore_errors=True)


def driver_cwd(rc: RealCluster) -> Path:
    """The folder ``kestrel`` runs from: beside the example (the first hidden folder), holding
    a decoy ``model.py`` (:func:`cluster`)."""
    return rc.hidden[0].parent / "elsewhere"


def kestrel(rc: RealCluster, *args, timeout: float = 400) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*KESTREL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=rc.driver_env(),
        cwd=driver_cwd(rc),
    )
    assert done.returncode == 0, (
        f"kestrel {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    )
    return done


def worker_node(rc: RealCluster) -> str:
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print([n['NodeID'] for n in ray.nodes() if n['Alive'] "
        "and n['Resources'].get('kestrel_worker')][0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, rc.address],
        capture_output=True,
        text=True,
        env=rc.node_env(),
        timeout=120,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def check_run_directory(run: Path, worker: str, epochs_at_least: int) -> None:
    status = json.loads((run / "status.json").read_text())
    for name in NODES:
        assert status["placement"][name] == [worker], status["placement"]
        assert (run / "graph" / name / "output.log").stat().st_size > 0, name
    assert (run / "graph" / "theta" / "estimator.pt").stat().st_size > 0, "no weights on the driver"
    rows = (run / "graph" / "theta" / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("epoch,") and len(rows) - 1 >= epochs_at_least, rows


def test_launch_sample_and_resume_on_a_worker_that_sees_no_files(cluster):
    rc, example, runs = cluster
    worker = worker_node(rc)
    config = example / "config.yml"
    run = runs / "r1"
    kestrel(
        rc,
        "launch",
        "-c",
        config,
        "-o",
        run,
        "--address",
        rc.address,
        "--seed",
        "3",
        *PINNED,
        *tiny(config, epochs=3),
    )
    check_run_directory(run, worker, epochs_at_least=1)
    first = sorted((run / "samples" / "posterior").glob("*/0*.npz"))
    assert first, "no posterior samples"

    kestrel(rc, "sample", "posterior", "-o", run, "-n", "50", "--address", rc.address)
    files = sorted((run / "samples" / "posterior").glob("*/0*.npz"))
    assert len(files) == len(first) + 1
    with np.load(files[-1]) as data:
        assert data["theta"].shape == (50, 10) and np.isfinite(data["theta"]).all()

    rows_before = len((run / "graph" / "theta" / "metrics.csv").read_text().splitlines())
    kestrel(rc, "launch", "-o", run, "--address", rc.address, "--epochs", "2")
    rows_after = len((run / "graph" / "theta" / "metrics.csv").read_text().splitlines())
    assert rows_after > rows_before, "the resumed run trained no epoch"
    check_run_directory(run, worker, epochs_at_least=rows_before)


def test_ray_job_submit_runs_a_launch(cluster):
    rc, example, runs = cluster
    worker = worker_node(rc)
    run = runs / "job"
    config = example / "config.yml"
    job = [
        *RAY,
        "job",
        "submit",
        "--address",
        rc.dashboard_url,
        "--working-dir",
        str(example),
        "--",
        "kestrel",
        "launch",
        "-c",
        "config.yml",
        "-o",
        str(run),
        "--seed",
        "4",
        *PINNED,
        *tiny(config, epochs=2),
    ]
    deadline = time.monotonic() + 120
    while True:  # the head's job agent registers a little after the head is up
        done = subprocess.run(
            job,
            capture_output=True,
            text=True,
            timeout=400,
            env=rc.node_env(),
            cwd=tempfile.gettempdir(),
        )
        if "No available agent" not in done.stderr or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "succeeded" in done.stdout.lower(), done.stdout[-3000:]
    check_run_directory(run, worker, epochs_at_least=1)
    assert sorted((run / "samples" / "posterior").glob("*/0*.npz"))


def test_without_a_token_joining_fails_in_one_line(cluster, tmp_path):
    rc, example, runs = cluster
    env = rc.driver_env()
    del env["RAY_AUTH_TOKEN_PATH"]
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    config = example / "config.yml"
    start = time.monotonic()
    done = subprocess.run(
        [
            *KESTREL,
            "launch",
            "-c",
            str(config),
            "-o",
            str(runs / "no-token"),
            "--address",
            rc.address,
            *tiny(config),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode != 0
    assert time.monotonic() - start < 90
    err = [line for line in done.stderr.strip().splitlines() if "kestrel" in line]
    assert err and rc.address in err[-1] and "no token found" in err[-1], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_without_an_address_a_private_local_ray_starts_not_the_running_cluster(cluster):
    # a `ray start` with Ray's default folders leaves its address in <tmp>/ray/ray_current_cluster,
    # where a bare ray.init() looks and joins; this cluster's address is put there (RAY_TMPDIR
    # moves <tmp>). Kestrel without --address / RAY_ADDRESS must start its own Ray instead
    rc, _, _ = cluster
    tmp = Path(tempfile.mkdtemp(prefix="kl", dir="/tmp"))  # short: Ray's sockets go in there
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text(rc.address)
    env = {**rc.driver_env(), "RAY_TMPDIR": str(tmp)}
    code = (
        "import ray; from kestrel_ray import init_ray; init_ray(num_cpus=1); "
        "print(ray.get_runtime_context().gcs_address); "
        "print(sorted(r for n in ray.nodes() for r in n['Resources'] if r.startswith('kestrel')))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
            timeout=180,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    address, resources = done.stdout.strip().splitlines()[-2:]
    assert address != rc.address and not address.endswith(f":{rc.port}"), done.stdout
    assert resources == "[]", resources  # neither kestrel_head nor kestrel_worker: not joined
