"""Example 04: z ~ N(0, I_3), x = exp(z) + N(0, sigma^2) with sigma = 1e-6.

A float64 precision test: the posterior standard deviations are sigma / x_o, from 1.5e-4
down to 6.7e-9.
"""

import numpy as np


class ExpPlusNoise:
    """x = exp(z) + N(0, sigma^2); z, x float64 (n, 3)."""

    def __init__(self, sigma: float = 1e-6):
        self.sigma = float(sigma)

    def simulate_batch(self, n, z, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return np.exp(z) + self.sigma * rng.standard_normal(z.shape)
