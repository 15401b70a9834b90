"""The Gaussian linear uniform task of the SBI benchmark (Lueckmann et al. 2021; ``sbibm``
1.1's ``gaussian_linear_uniform``): theta ~ U(-1, 1)^10 (``config.yml``) and
x = theta + N(0, 0.1 I_10). The posterior is N(x, 0.1 I) truncated to the prior's box.
"""

from __future__ import annotations

import numpy as np

NOISE_VAR = 0.1


class GaussianNoise:
    """The simulator Kestrel calls: theta float64 ``(n, 10)`` -> x = theta + N(0, variance I)."""

    def __init__(self, variance: float = NOISE_VAR):
        self.std = float(np.sqrt(variance))

    def simulate_batch(self, n, theta, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        theta = np.asarray(theta, dtype=np.float64)
        return theta + self.std * rng.standard_normal(theta.shape)
