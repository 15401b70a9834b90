"""Small simulators and estimators for the end-to-end tests (importable by the node actors)."""

from __future__ import annotations

import numpy as np


class Noisy:
    """x = z + N(0, sigma^2)."""

    def __init__(self, sigma: float = 0.05):
        self.sigma = float(sigma)

    def simulate_batch(self, n, z, rng=None):
        return z + self.sigma * rng.standard_normal(z.shape)


class SlowNoisy(Noisy):
    """Like :class:`Noisy`, but each call takes ``delay`` seconds more (rounds slower than epochs)."""

    def __init__(self, sigma: float = 0.05, delay: float = 0.1):
        super().__init__(sigma)
        self.delay = float(delay)

    def simulate_batch(self, n, z, rng=None):
        import time

        time.sleep(self.delay)
        return super().simulate_batch(n, z, rng)


class SometimesNaN(Noisy):
    """Like :class:`Noisy`, but ~20 % of the rows are NaN and the first row of every call +inf (K09)."""

    def simulate_batch(self, n, z, rng=None):
        x = super().simulate_batch(n, z, rng)
        x[rng.random(n) < 0.2] = np.nan
        x[0, 0] = np.inf
        return x


class AlwaysNaN:
    """Every simulation is NaN (K09: an all-invalid round is an error naming the node)."""

    def simulate_batch(self, n, z):
        return np.full(z.shape, np.nan)


class FailsLater(Noisy):
    """Raises on its third call: a simulator failure during resimulation."""

    calls = 0

    def simulate_batch(self, n, z, rng=None):
        self.calls += 1
        if self.calls >= 3:
            raise RuntimeError("simulator broke on purpose in call 3")
        return super().simulate_batch(n, z, rng)


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


class BadInit:
    """A simulator whose constructor raises a TypeError (K16: the original text, with the node)."""

    def __init__(self, sigma: float = 0.1):
        raise TypeError(f"BadInit() got a sigma it cannot use: {sigma!r}")

    def simulate_batch(self, n, z):
        return z
