"""Simulators that fail on purpose, importable by the node actors (``tests.faults.fault_models``)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: noise of every simulator here: x = z + SIGMA · N(0, 1); a row whose |x − z| exceeds
#: 8 SIGMA pairs an x with another sample's z
SIGMA = 0.05


def _count(folder: str) -> int:
    """Count one more batch in ``folder`` (a file per batch: survives the process); returns it."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    k = len(list(path.glob("batch-*"))) + 1
    (path / f"batch-{k:05d}").touch()
    return k


class KilledAt:
    """x = z + noise; the process is killed (SIGKILL, as the OOM killer does) at the start of the
    batches numbered in ``kill_at`` (1-based, counted over every process of the actor)."""

    def __init__(self, folder: str, kill_at: Sequence[int] = ()):
        self.folder = str(folder)
        self.kill_at = {int(k) for k in kill_at}

    def simulate_batch(self, n, z, rng=None):
        k = _count(self.folder)
        if k in self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return z + SIGMA * rng.standard_normal(z.shape)


class HangsAt:
    """x = z + noise; batches numbered in ``hang_at`` sleep ``seconds`` first (a stuck call)."""

    def __init__(self, folder: str, hang_at: Sequence[int] = (), seconds: float = 3600.0):
        self.folder = str(folder)
        self.hang_at = {int(k) for k in hang_at}
        self.seconds = float(seconds)

    def simulate_batch(self, n, z, rng=None):
        if _count(self.folder) in self.hang_at:
            time.sleep(self.seconds)
        return z + SIGMA * rng.standard_normal(z.shape)


def batches(folder) -> int:
    """How many batches the simulators counting in ``folder`` began."""
    return len(list(Path(folder).glob("batch-*")))


def paired(z: np.ndarray, x: np.ndarray) -> bool:
    """Whether every row's x was simulated from that row's z (|x − z| < 8 σ)."""
    return bool((np.abs(np.asarray(x) - np.asarray(z)) < 8 * SIGMA).all())
