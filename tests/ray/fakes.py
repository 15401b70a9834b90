"""A fake estimator and a failing node actor class for the Ray tests (imported by the node
actors too); the simulators are in :mod:`kestrel_core.testing.models`."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from kestrel_core.testing.models import FakeTensor


class SlowEstimator:
    """Estimator protocol for K07 and K19: trains ``steps`` steps of ``step_s`` seconds, each
    followed by ``await asyncio.sleep(0)``; fetches from the buffer view in a thread first.

    ``sample_proposal`` returns value = x_o[0] + scaffold row sum (so rows are checkable) and
    records the condition shapes it received.
    """

    def __init__(self, steps=200, step_s=0.05, dim=2):
        self.steps, self.step_s, self.dim = int(steps), float(step_s), int(dim)
        self.done = 0
        self.fetched = -1
        self.seen_shapes = []
        self._stop = False
        self.state = "idle"

    def setup(self, context):
        self.context = context

    async def train(self, view):
        self.state = "training"
        fetch = await asyncio.to_thread(view.fetch, [0, 1, 2], ["theta.value"])
        self.fetched = len(fetch.new_ids)
        for _ in range(self.steps):
            if self._stop:
                break
            time.sleep(self.step_s)
            self.done += 1
            await asyncio.sleep(0)
        self.state = "done"

    def _draw(self, n, conditions):
        self.seen_shapes.append({k: tuple(np.shape(v)) for k, v in conditions.items()})
        x = np.asarray(conditions["x"])
        value = np.broadcast_to(x[:, :1], (n, 1)) * np.ones((n, self.dim))
        if "s" in conditions:
            value = value + np.asarray(conditions["s"]).sum(axis=1, keepdims=True)
        return {"value": FakeTensor(value), "log_prob": np.zeros(n)}

    def sample_prior(self, n):
        return {"value": np.zeros((n, self.dim)), "log_prob": np.zeros(n)}

    def sample_posterior(self, n, conditions):
        return self._draw(n, conditions)

    def sample_proposal(self, n, conditions):
        return self._draw(n, conditions)

    def save_bytes(self):
        return b"fake-estimator"

    def load_bytes(self, data, *, source="checkpoint bytes"):
        if data != b"fake-estimator":
            raise ValueError(f"{source}: not a fake estimator's state")

    def save(self, directory):
        pass

    def load(self, directory):
        pass

    def request_stop(self):
        self._stop = True

    def status(self):
        return {
            "epoch": 0,
            "max_epochs": 1,
            "train_loss": None,
            "val_loss": None,
            "samples_seen": self.fetched,
            "state": self.state,
            "steps": self.done,
            "seen_shapes": self.seen_shapes,
        }


class DyingWrapper:
    """A node actor class whose constructor raises (stands in for an actor dying in __init__)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("boom in the actor constructor")

    async def ready(self):
        return {}
