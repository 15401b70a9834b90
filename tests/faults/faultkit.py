"""Helpers of the fault-injection tests: a tiny run config, reading a run back, killing actors.

Launches run in this process on the session's Ray (``ray_session`` of the ``kestrel_ray.testing``
plugin), so a test costs a launch (seconds), not a Ray start. Actors are killed the way the
operating system kills them — ``SIGKILL`` to the actor's process — found by their pid: a node
actor logs ``actor pid N`` into ``graph/<node>/output.log``; the store's pid is in Ray's actor
table.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kestrel_core.testing.models import FAULT_SIGMA

#: the counting simulators (``KilledAt``, ``HangsAt``) and the others the fault tests run
MODELS = "kestrel_core.testing.models"
#: epochs and patience no run reaches: only a fault, a stop or ``--epochs`` ends such a run
FOREVER = 1_000_000


def toy(tmp_path: Path, x: dict[str, Any] | None = None, *, epochs: int = 2, **buffer: Any):
    """z ~ U(0, 1)², x = z + 0.05 · noise (observed), a Gaussian estimator for ``epochs`` epochs.

    Args:
        x: the simulator of x (default: ``KilledAt`` that kills nothing).
        buffer: overrides of the buffer section.
    """
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([0.4, 0.6]))
    return {
        "buffer": {
            "min_samples": 64,
            "max_samples": 256,
            "validation_samples": 16,
            "simulate_count": 16,
            "simulate_interval": 0.05,
            **buffer,
        },
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": {
                    "_target_": "kestrel_torch.GaussianPosterior",
                    "max_epochs": epochs,
                    "early_stop_patience": FOREVER,
                },
            },
            "x": {
                "simulator": x
                or {"_target_": f"{MODELS}.KilledAt", "folder": str(tmp_path / "batches")},
                "parents": ["z"],
                "observed": str(obs),
                "sample_chunk_size": 16,
                "dry_run": False,  # the simulators here count their batches (and may kill)
            },
        },
        "sample": {"posterior": {"n": 5}},
    }


def status(run: Path) -> dict[str, Any]:
    return json.loads((run / "status.json").read_text())


def driver_log(run: Path) -> str:
    return (run / "graph" / "driver" / "output.log").read_text()


def paired(z: np.ndarray, x: np.ndarray) -> bool:
    """Whether every row's x was simulated from that row's z (|x − z| < 8 σ of ``KilledAt``)."""
    return bool((np.abs(np.asarray(x) - np.asarray(z)) < 8 * FAULT_SIGMA).all())


def buffer_file(run: Path) -> dict[str, np.ndarray]:
    """The arrays of ``RUN/buffer/snapshots/buffer.npz`` (read without pickle)."""
    with np.load(run / "buffer" / "snapshots" / "buffer.npz", allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def epochs_logged(run: Path, node: str = "z") -> int:
    """The last epoch in ``graph/<node>/metrics.csv`` (0 before the first)."""
    try:
        rows = (run / "graph" / node / "metrics.csv").read_text().splitlines()[1:]
    except FileNotFoundError:
        return 0
    return int(rows[-1].split(",")[0]) if rows else 0


def actor_pid(run: Path, node: str) -> int | None:
    """The pid the node's actor logged (``None`` before it did)."""
    try:
        text = (run / "graph" / node / "output.log").read_text()
    except FileNotFoundError:
        return None
    found = re.findall(r"actor pid (\d+)", text)
    return int(found[-1]) if found else None


def store_pid() -> int:
    """The pid of the only live ``SampleStore`` actor of this Ray."""
    from ray._private import state

    pids = [
        int(a["Pid"])
        for a in state.actors().values()
        if a["State"] == "ALIVE" and a["ActorClassName"] == "SampleStore"
    ]
    assert len(pids) == 1, f"expected one live store, found {len(pids)}"
    return pids[0]


class Killer(threading.Thread):
    """Sends SIGKILL to a process once ``ready()`` holds (polled every 0.1 s, at most ``within``
    seconds); ``killed_at`` is the ``time.monotonic()`` of the kill."""

    def __init__(self, ready: Callable[[], bool], pid: Callable[[], int | None], within=120.0):
        super().__init__(name="fault-killer", daemon=True)
        self.ready, self.pid, self.within = ready, pid, within
        self.killed_at: float | None = None
        self.error: str | None = None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.within
        while time.monotonic() < deadline:
            if self.ready():
                pid = self.pid()
                if pid is None:
                    self.error = "no pid to kill"
                    return
                os.kill(pid, signal.SIGKILL)
                self.killed_at = time.monotonic()
                return
            time.sleep(0.1)
        self.error = f"not ready within {self.within} s"


def checkpointed(run: Path, epochs: int = 1) -> Callable[[], bool]:
    """Whether a checkpoint holds the buffer and weights of at least ``epochs`` epochs of z."""

    def ready() -> bool:
        saved = run / "graph" / "z" / "saved.json"
        if not saved.is_file() or not (run / "buffer" / "snapshots" / "buffer.npz").is_file():
            return False
        try:
            return int(json.loads(saved.read_text())["epoch"]) >= epochs
        except (ValueError, KeyError):
            return False

    return ready


def journaled_beyond(
    run: Path, checkpoint: Callable[[], bool], files: int = 2
) -> Callable[[], bool]:
    """Whether ``checkpoint()`` holds and at least ``files`` journal files hold appends the
    checkpoint's snapshot does not: rows that only the journal has. The journal keeps every
    append (it is the run's simulation bank, nothing is trimmed), so its files are counted
    from the snapshot's next id on (a file is ``<first id>-<last id>.npz``)."""
    from kestrel_core.store import read_buffer_file

    def ready() -> bool:
        if not checkpoint():
            return False
        try:
            snapshot = read_buffer_file(run / "buffer" / "snapshots")
        except Exception:  # a snapshot being replaced: the next poll reads it
            return False
        if snapshot is None:
            return False
        first_ids = []
        for file in (run / "buffer" / "journal").glob("*.npz"):
            head = file.name.split("-", 1)[0]
            if head.isdigit():
                first_ids.append(int(head))
        return sum(1 for first in first_ids if first >= snapshot.next_id) >= files

    return ready


def contiguous(ids: np.ndarray) -> bool:
    """Whether ``ids`` are ``0, 1, …, n-1`` in some order: none lost, none twice."""
    return bool(np.array_equal(np.sort(ids), np.arange(len(ids))))
