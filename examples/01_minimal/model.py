"""Example 01: z ~ U(-100, 100)^3, x = z + N(0, sigma^2)."""

import numpy as np


class AddNoise:
    """x = z + N(0, sigma^2) per component.

    Args:
        sigma: noise standard deviation (same units as z).
    """

    def __init__(self, sigma: float = 0.1):
        self.sigma = float(sigma)

    def simulate_batch(self, n, z, rng=None):
        """z: float64 (n, 3) → x: float64 (n, 3)."""
        rng = np.random.default_rng() if rng is None else rng
        return z + self.sigma * rng.standard_normal(z.shape)
