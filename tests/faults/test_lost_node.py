"""A worker machine lost mid-run (issue 32, item 4): the launch goes on with the remaining nodes.

A ``ray start`` cluster on this host (:mod:`tests.faults.lost_node`): a head offering
``kestrel_head`` (the estimator node z and the store, and the driver's node) and two worker
nodes offering ``kestrel_sim``, each in its own mount namespace, that cannot see the run
folder. The simulator node x runs two replicas spread over the two workers; its blocks are
128 KiB (above Ray's 100 KiB limit for objects returned inline to the caller), so they live in
the object store of the worker that simulated them. During resimulation one worker node is
lost — ``SIGKILL`` to its raylet, object store and every process it started, at once.

What keeps the run going is Ray's, set by Kestrel on simulator actors
(:func:`kestrel_ray.cluster._resources.actor_options`): ``max_restarts`` restarts the lost
replica on the remaining worker, and ``max_task_retries=-1`` retries the calls it was running
— and lets Ray rebuild a finished call's blocks whose only copy was in the lost node's object
store (lineage reconstruction, which Ray does for actor calls only when their retries are not
0) — by running the call again with the same seeds, so the same rows come back.
Before ``max_task_retries=-1`` (it was 3) the retries were used up while the lost node was not
yet declared dead, and the launch failed ≈ 15 s after the kill with ``SimulatorError: node
'x': actor died during sample(16): … The actor is temporarily unavailable``.

Two more outcomes, each on a cluster of its own: the only worker that offers ``kestrel_sim``
lost (the replicas wait in Ray for a node in vain: the launch's restart watch stops it after
``KESTREL_RESTART_WAIT`` seconds, naming the lost Ray node, and a node that joins continues
the run with ``kestrel launch -o RUN``); and the estimator's worker node lost (its actor is
never restarted: the launch stops as after a killed estimator actor, and the remaining worker
continues the run from the last checkpoint's weights and the bank).

Each test counts: every row the store accepted (the journal, the run's simulation bank, written
by the driver right after each append) is in the final buffer, read back from the store's
blocks at the end, with the same id and the same values: 0 stored samples lost, none changed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from ..integration.helpers import KESTREL
from ..integration.real_cluster import unshare_works
from .faultkit import actor_pid
from .lost_node import LostNodeCluster, worker_of

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        not unshare_works(),
        reason="needs `unshare --mount` and tmpfs mounts (root, or unprivileged user "
        "namespaces) for worker nodes that see other disks",
    ),
    pytest.mark.timeout(600),
]

#: simulations of the run: the kill comes once about a third of them reached the store
BUDGET = 960
KILL_AT_ROWS = 320
#: values per row of x (float64): 16 rows a chunk make a 256 KiB block
WIDTH = 2048


def config(folder: Path, estimator_on: str = "kestrel_head") -> dict:
    """z ~ U(0, 1)² on the head (Gaussian estimator); x = z spread over ``WIDTH`` values +
    noise, two replicas spread over the workers (``kestrel_sim``)."""
    np.save(folder / "obs.npy", np.repeat([0.4, 0.6], WIDTH // 2))
    return {
        "budget": {"simulations": BUDGET},
        "buffer": {
            "min_samples": 64,
            "max_samples": 100_000,  # nothing evicted: the final buffer holds every row
            "validation_samples": 16,
            "simulate_count": 32,
            "simulate_interval": 0.05,
        },
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "ray": {"resources": {estimator_on: 1}},
                "estimator": {
                    "_target_": "kestrel_torch.GaussianPosterior",
                    "max_epochs": 100_000,
                    "early_stop_patience": 3,
                },
            },
            "x": {
                "simulator": {
                    "_target_": "kestrel_core.testing.models.Megabyte",
                    "width": WIDTH,
                },
                "parents": ["z"],
                "observed": str(folder / "obs.npy"),
                "sample_chunk_size": 16,
                "num_actors": 2,
                "ray": {"resources": {"kestrel_sim": 1}, "scheduling_strategy": "SPREAD"},
            },
        },
        "sample": {"posterior": {"n": 5}},
    }


def journal_rows(run: Path) -> int:
    """Rows in the run's journal so far (from its file names, ``<first>-<last>.npz``)."""
    total = 0
    for file in (run / "buffer" / "journal").glob("*.npz"):
        first, _, last = file.stem.partition("-")
        if first.isdigit() and last.isdigit():
            total += int(last) - int(first) + 1
    return total


def bank(run: Path) -> dict[str, dict[int, np.ndarray]]:
    """Every journaled row: flat key → id → row."""
    from kestrel_core.store import journal_files, read_journal_file

    rows: dict[str, dict[int, np.ndarray]] = {}
    for file in journal_files(run / "buffer" / "journal"):
        block = read_journal_file(file)
        for key, values in block.arrays.items():
            rows.setdefault(key, {}).update(zip(block.ids.tolist(), values))
    return rows


@pytest.fixture
def folder():
    base = Path(tempfile.mkdtemp(prefix="kestrel-ln-"))
    (base / "config.yml").write_text(yaml.safe_dump(config(base)))
    yield base
    shutil.rmtree(base, ignore_errors=True)


#: ``kestrel`` with a checkpoint every 0.5 s (a launch checkpoints every 60 s)
KESTREL_FAST_CHECKPOINTS = [
    sys.executable,
    "-c",
    "import runpy, kestrel.persist._checkpoint as c; c.CHECKPOINT_EVERY = 0.5; "
    "runpy.run_module('kestrel', run_name='__main__')",
]


def launch_and_lose(
    rc,
    base: Path,
    run: Path,
    worker: int | Callable[[], int],
    *args: str,
    command: list = KESTREL,
    ready: Callable[[], bool] = lambda: True,
    **env: str,
):
    """``kestrel launch`` of :func:`config` into ``run``; worker node ``worker`` (or the one
    ``worker()`` names then) lost once :data:`KILL_AT_ROWS` rows are journaled and ``ready()``
    (progress the test needs first, by count or file, never by seconds). Returns
    ``(seconds from the kill to the launch's end, the launch's output, its exit status)``;
    fails the test on a hang."""
    out = run.with_suffix(".txt")
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [*command, "launch", "-c", base / "config.yml", "-o", run]
            + ["--address", rc.address, "--progress", "log", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**rc.driver_env(), **env},
            cwd=base,
        )
    killed_at = None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if killed_at is None and (rows := journal_rows(run)) >= KILL_AT_ROWS and ready():
            if callable(worker):
                worker = worker()
            pids = rc.lose_worker(worker)  # at once: nothing slow before the kill
            killed_at = time.monotonic()
            print(f"worker node {worker} lost at {rows} journaled rows: {len(pids)} killed")
            print(f"the store's node: {store_node(rc)}")
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        pytest.fail("the launch hung after the worker node was lost")
    assert killed_at is not None, "the launch ended before the kill"
    return time.monotonic() - killed_at, out.read_text(errors="replace"), proc.returncode


def store_node(rc) -> str:
    """``head`` or ``worker`` (where the launch's store actor runs), read by another driver."""
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "from ray._private import state; "
        "head = [n['NodeID'] for n in ray.nodes() if n['Resources'].get('kestrel_head')]; "
        "store = [a['Address']['NodeID'] for a in state.actors().values() "
        "if a['ActorClassName'] == 'SampleStore' and a['State'] == 'ALIVE']; "
        "print('head' if store and store[0] in head else f'worker {store}')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, rc.address],
        capture_output=True,
        text=True,
        env=rc.node_env(),
        timeout=60,
    )
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]


def lost_and_changed(run: Path, saved: dict[str, dict[int, np.ndarray]]) -> tuple[list, list]:
    """The ids of ``saved`` (bank rows) missing from the run's final ``buffer.npz``, and those
    there with other values."""
    with np.load(run / "buffer" / "snapshots" / "buffer.npz", allow_pickle=False) as data:
        final = {k: data[k] for k in data.files}
    where = {int(i): r for r, i in enumerate(final["_ids"])}
    ids = sorted(next(iter(saved.values())))
    lost = [i for i in ids if i not in where]
    changed = [
        i
        for i in ids
        if i in where
        and any(not np.array_equal(final[key][where[i]], rows[i]) for key, rows in saved.items())
    ]
    return lost, changed


def test_a_lost_worker_node_costs_no_stored_row_and_the_launch_completes(folder):
    base, run = folder, folder / "goes-on"
    with LostNodeCluster([base], {"kestrel_sim": 2}, workers=2) as rc:
        after_kill, output, code = launch_and_lose(rc, base, run, 0, "--seed", "5")
    print(f"the launch ended {after_kill:.1f} s after the kill")  # RELIABILITY.md
    status = json.loads((run / "status.json").read_text())
    assert code == 0 and status["status"] == "completed", output[-5000:]
    for error in ("ObjectLostError", "RayActorError", "OwnerDiedError", "Traceback"):
        assert error not in output, output[-5000:]
    # the lost replica was restarted on the remaining worker, said on the driver's log
    log = (run / "graph" / "driver" / "output.log").read_text()
    assert "lost with Ray node" in log and status["restarts"].get("x", 0) >= 1, log[-3000:]
    print(f"Ray's notes of lost objects rebuilt: {output.count('Attempting to recover')}")
    # 0 stored samples lost: every row of the bank is in the final buffer, same id, same values
    # (a block rebuilt by Ray from its call's seeds equals the one the driver journaled)
    saved = bank(run)
    ids = sorted(next(iter(saved.values())))
    assert ids == list(range(len(ids))) and len(ids) >= KILL_AT_ROWS
    lost, changed = lost_and_changed(run, saved)
    print(f"rows in the bank: {len(ids)}, lost: {len(lost)}, changed: {len(changed)}")
    assert not lost and not changed
    assert status["simulated"] >= BUDGET


def test_no_node_left_for_the_simulator_stops_cleanly_and_a_new_node_continues(folder):
    base, run = folder, folder / "stops"
    with LostNodeCluster([base], {"kestrel_sim": 2}, workers=1) as rc:
        # the only worker node offering kestrel_sim lost: the replicas wait for a node in vain
        # work certainly left at the kill, by count: a budget far beyond what can be
        # simulated while the node's loss is noticed (the launch is meant to stop there)
        after_kill, output, code = launch_and_lose(
            rc, base, run, 0, "--seed", "6", "--simulations", "1000000", KESTREL_RESTART_WAIT="5"
        )
        print(f"no node left: the launch failed {after_kill:.1f} s after the kill")  # RELIABILITY
        status = json.loads((run / "status.json").read_text())
        assert code == 1 and status["status"] == "failed", output[-5000:]
        print(f"reason: {status['reason']}")
        assert "kestrel launch -o" in output, output[-3000:]
        assert "Traceback" not in output and "ObjectLostError" not in output, output[-5000:]
        saved = bank(run)
        # a new machine joins; the resume continues the run on it (64 simulations more than
        # the ids so far) and loses no stored row
        more = str(max(next(iter(saved.values()))) + 1 + 64)
        rc.add_worker()
        done = subprocess.run(
            [*KESTREL, "launch", "-o", run, "--address", rc.address, "--progress", "log"]
            + ["--simulations", more],
            capture_output=True,
            text=True,
            timeout=300,
            env=rc.driver_env(),
            cwd=base,
        )
    status = json.loads((run / "status.json").read_text())
    assert done.returncode == 0 and status["status"] == "completed", done.stdout[-4000:]
    lost, changed = lost_and_changed(run, saved)
    n = len(next(iter(saved.values())))
    after = len(next(iter(bank(run).values())))
    print(f"resumed on a new node: rows in the bank before: {n}, after: {after}, lost: {len(lost)}")
    assert not lost and not changed
    assert after > n, "the new node simulated nothing"


def test_the_estimators_node_lost_stops_the_run_and_the_remaining_nodes_continue_it(folder):
    # the estimator z on a worker node (kestrel_est, offered by both workers), x's replicas
    # spread over both; the worker running z is lost: z's actor (never restarted: it holds the
    # training state) is gone, the launch stops as after a killed estimator actor
    (folder / "config.yml").write_text(yaml.safe_dump(config(folder, "kestrel_est")))
    base, run = folder, folder / "estimator"
    resources = {"kestrel_sim": 2, "kestrel_est": 1}
    with LostNodeCluster([base], resources, workers=2) as rc:

        def estimators_worker() -> int:
            pid = actor_pid(run, "z")
            assert pid is not None, "z's actor logged no pid"
            return worker_of(rc, pid)

        weights = run / "graph" / "z" / "estimator.pt"
        # the kill once z's weights are on disk (a checkpoint after its first epoch), with a
        # budget the launch cannot spend first (the run is meant to stop there)
        after_kill, output, code = launch_and_lose(
            rc,
            base,
            run,
            estimators_worker,
            "--seed",
            "7",
            "--simulations",
            "1000000",
            command=KESTREL_FAST_CHECKPOINTS,
            ready=weights.is_file,
        )
        print(f"estimator's node lost: the launch failed {after_kill:.1f} s after the kill")
        status = json.loads((run / "status.json").read_text())
        assert code == 1 and status["status"] == "failed", output[-5000:]
        print(f"reason: {status['reason']}")
        assert "node 'z'" in status["reason"], status["reason"]
        assert weights.is_file(), "no weights on disk"
        saved = bank(run)
        more = str(max(next(iter(saved.values()))) + 1 + 64)  # 64 simulations more
        done = subprocess.run(  # on the remaining worker node
            [*KESTREL, "launch", "-o", run, "--address", rc.address, "--progress", "log"]
            + ["--simulations", more],
            capture_output=True,
            text=True,
            timeout=300,
            env=rc.driver_env(),
            cwd=base,
        )
    status = json.loads((run / "status.json").read_text())
    assert done.returncode == 0 and status["status"] == "completed", done.stdout[-4000:]
    assert status["resumed"] == ["z"], status["resumed"]
    lost, changed = lost_and_changed(run, saved)
    n = len(next(iter(saved.values())))
    print(f"resumed on the remaining node: rows in the bank before: {n}, lost: {len(lost)}")
    assert not lost and not changed
