"""Example 02: every dimension's posterior has two well-separated modes.

z ~ U(-1, 1)^4;  s_i = ±shift with a random sign per dimension;  x = z + s + N(0, sigma^2).
Given x, each z_i is x_i - shift or x_i + shift with equal weight: 2^4 = 16 modes.
"""

import numpy as np


class Shift:
    """m = z + s with s_i = ±shift, the sign drawn per sample and dimension."""

    def __init__(self, shift: float = 0.3):
        self.shift = float(shift)

    def simulate_batch(self, n, z, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        sign = rng.integers(0, 2, size=z.shape) * 2 - 1
        return z + self.shift * sign


class Noise:
    """x = m + N(0, sigma^2), one sample at a time (exercises the per-sample path)."""

    def __init__(self, sigma: float = 0.05):
        self.sigma = float(sigma)

    def simulate(self, m, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return m + self.sigma * rng.standard_normal(m.shape)
