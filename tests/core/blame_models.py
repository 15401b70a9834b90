"""Simulators for the dry-run and ``on_error`` tests (K33, K34).

Used as classes in Python-API tests and copied as ``model.py`` next to a test config so that
``_target_: model.SIR`` imports it from the config's folder.
"""

import numpy as np


class SIR:
    """A stand-in epidemic: ``days`` daily counts per sample (``days=59`` is the K33 bug)."""

    def __init__(self, days=60):
        self.days = int(days)

    def simulate_batch(self, n, theta, rng=None):
        t = np.arange(self.days)
        return theta[:, :1] * np.exp(-0.05 * t) + 0.01 * rng.standard_normal((n, self.days))


class Fragile:
    """``x = theta + noise``, but a ``ValueError`` for a sample with ``theta[0] > limit`` (K34)."""

    def __init__(self, limit=2.0, sigma=0.1):
        self.limit = float(limit)
        self.sigma = float(sigma)

    def simulate_batch(self, n, theta, rng=None):
        if (theta[:, 0] > self.limit).any():
            raise ValueError(f"theta[0] > {self.limit}: the epidemic does not converge")
        return theta + self.sigma * rng.standard_normal(theta.shape)


class AlwaysFails:
    """Raises on every sample."""

    def simulate_batch(self, n, theta):
        raise RuntimeError("this simulator never works")


class Wide:
    """``x = theta + noise`` per sample ``D`` in calls of at most ``small`` samples (the dry run's),
    one extra column in larger calls (the ones on Ray): a shape that changes between calls (K05)."""

    def __init__(self, small=2):
        self.small = int(small)

    def simulate_batch(self, n, theta, rng=None):
        x = theta + 0.1 * rng.standard_normal(theta.shape)
        return x if n <= self.small else np.concatenate([x, x[:, :1]], axis=1)
