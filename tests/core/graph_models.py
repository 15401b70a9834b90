"""Small simulators for the graph / config / forward / CLI tests.

Used two ways: as classes (``graph_models.Noise``) in Python-API tests, and copied as
``model.py`` next to a test config so ``_target_: model.Noise`` imports it from the config's
folder (``paths.imports``).
"""

import numpy as np


class Shift:
    """Deterministic ``mu = theta + offset``."""

    def __init__(self, offset=0.0):
        self.offset = float(offset)

    def simulate_batch(self, n, theta):
        return theta + self.offset


class Noise:
    """``x = mu + sigma * N(0, 1)`` using the rng Kestrel passes."""

    def __init__(self, sigma=0.1):
        self.sigma = float(sigma)

    def simulate_batch(self, n, mu, rng=None):
        return mu + self.sigma * rng.standard_normal(mu.shape)


class Gauss:
    """Root simulator: ``(n, dim)`` standard normals (no ``log_prob``)."""

    def __init__(self, dim=3):
        self.dim = int(dim)

    def simulate_batch(self, n, rng=None):
        return rng.standard_normal((n, self.dim))


class Concat:
    """``simulate_batch(n, a, b)`` → ``[a, b]`` side by side (checks the parents' order)."""

    def simulate_batch(self, n, a, b):
        return np.concatenate([a, b], axis=1)


class PerSample:
    """Per-sample ``simulate(theta)`` → ``2 * theta``."""

    def simulate(self, theta):
        return 2.0 * theta


class Needs:
    """Has a required argument and a nested component."""

    def __init__(self, scale, inner=None):
        self.scale = scale
        self.inner = inner

    def simulate_batch(self, n, rng=None):
        return np.full((n, 1), float(self.scale))


class Inner:
    def __init__(self, width=1):
        self.width = width


class Counting:
    """Counts constructions (class attribute) and calls; draws ``(n, 2)`` uniforms."""

    built = 0

    def __init__(self):
        type(self).built += 1
        self.calls = []

    def simulate_batch(self, n, rng=None):
        self.calls.append(n)
        return rng.random((n, 2))


class Mutator:
    """Tries to write into its input."""

    def simulate_batch(self, n, theta):
        theta[:] = 0.0
        return theta


class Scalar:
    """Per-sample shape ``()``."""

    def simulate_batch(self, n, theta):
        return theta.sum(axis=1)
