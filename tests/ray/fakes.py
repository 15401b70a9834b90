"""Simulators and a fake estimator for the Ray tests (imported by the node actors too)."""

from __future__ import annotations

import asyncio
import time

import numpy as np


class Gauss:
    """Root: ``(n, dim)`` standard normals; has a ``log_prob`` like a prior."""

    def __init__(self, dim=2):
        self.dim = int(dim)

    def simulate_batch(self, n, rng=None):
        return rng.standard_normal((n, self.dim))

    def log_prob(self, value):
        return -0.5 * (value**2).sum(axis=1) - 0.5 * self.dim * np.log(2 * np.pi)


class Noise:
    """``x = mu + sigma · N(0, 1)``."""

    def __init__(self, sigma=0.1):
        self.sigma = float(sigma)

    def simulate_batch(self, n, mu, rng=None):
        return mu + self.sigma * rng.standard_normal(mu.shape)


class Probe:
    """Reports what it received: per row [broadcast?, writeable?, leading dim of the input, x[0]]."""

    def simulate_batch(self, n, x):
        out = np.empty((n, 4))
        out[:, 0] = float(x.strides[0] == 0)
        out[:, 1] = float(x.flags.writeable)
        out[:, 2] = x.shape[0]
        out[:, 3] = x[:, 0]
        return out


class Tensorish:
    """Not a numpy array, but convertible through ``__array__`` (like a CPU tensor)."""

    def __init__(self, arr):
        self._arr = np.asarray(arr)

    def __array__(self, dtype=None, copy=None):
        return self._arr if dtype is None else self._arr.astype(dtype)


class Quirky:
    """Returns a different kind of output per ``n`` (K12): 1 list, 2 tensor-like, 3 None,
    4 dict without 'value', 5 wrong leading dimension, else an array."""

    def simulate_batch(self, n):
        if n == 1:
            return [0.5]
        if n == 2:
            return Tensorish(np.ones((2, 3)))
        if n == 3:
            return None
        if n == 4:
            return {"values": np.zeros((4, 1))}
        if n == 5:
            return np.zeros(2)
        return np.zeros((n, 3))


class Ragged:
    """Per-sample simulator: sample 5 (theta[0] == 5) has shape (9,), the others (10,) (K05)."""

    def simulate(self, theta):
        return np.zeros(9 if int(theta[0]) == 5 else 10)


class Index:
    """Root: row i of the call holds [i, i] (a deterministic prior-like source)."""

    def simulate_batch(self, n):
        return np.repeat(np.arange(n, dtype=np.float64)[:, None], 2, axis=1)


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
        return {"value": Tensorish(value), "log_prob": np.zeros(n)}

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


class Failing:
    """Raises its own ValueError (a user simulator bug)."""

    def simulate_batch(self, n, mu):
        raise ValueError("negative variance in the user's simulator")


class CrashOnce:
    """``x = mu`` — but the first call ever (marker file absent) kills the actor process."""

    def __init__(self, marker):
        self.marker = str(marker)

    def simulate_batch(self, n, mu):
        import os

        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)  # a crash, not an exception: Ray restarts the actor and retries the call
        return np.array(mu)
