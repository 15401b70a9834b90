"""An estimator that fails for the end-to-end tests (importable by the node actors); their
simulators are in :mod:`kestrel_core.testing.models`, but for :class:`GatedNoise` (a simulator
that reports its calls through files)."""

from __future__ import annotations

import os
import time

import numpy as np


class BrokenEstimator:
    """An estimator whose training raises (an actor error during training)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def setup(self, context):
        self.node = context.node

    async def train(self, view):
        raise ValueError("estimator exploded on purpose")

    def request_stop(self):
        pass

    def status(self):
        return {"state": "idle", "epoch": 0, "max_epochs": 1}


class GatedNoise:
    """x = μ + 0.05·ε, whose calls tell the test when they run: each ``simulate_batch`` call of a
    process writes ``<folder>/<pid>-<k>-start`` when it begins and ``<pid>-<k>-done`` when it
    ends (k: the process's call count); a process's first call waits until the file
    ``<folder>/release`` exists (at most ``wait`` seconds), so the test knows what the driver
    submitted while every replica's first call was still running."""

    def __init__(self, folder, wait=120.0):
        self.folder, self.wait, self.calls = str(folder), float(wait), 0

    def _touch(self, k, what):
        with open(os.path.join(self.folder, f"{os.getpid()}-{k}-{what}"), "w"):
            pass

    def simulate_batch(self, n, mu, rng=None):
        k, self.calls = self.calls, self.calls + 1
        self._touch(k, "start")
        if k == 0:
            deadline = time.monotonic() + self.wait
            release = os.path.join(self.folder, "release")
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.01)
        out = np.asarray(mu, dtype=np.float64) + 0.05 * rng.standard_normal(np.shape(mu))
        self._touch(k, "done")
        return out
