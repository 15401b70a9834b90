"""Example 09: the Gaussian linear task of the SBI benchmark (10-D).

theta ~ N(0, 0.1 I_10) and x = theta + N(0, 0.1 I_10) (0.1 is the variance of both). The
posterior is Gaussian and known in closed form: N(x / 2, 0.05 I_10).
"""

import numpy as np

DIM = 10
PRIOR_VAR = 0.1
NOISE_VAR = 0.1


def log_likelihood(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log p(x | theta), exact: theta (..., 10), x (10,) -> float64 (...)."""
    d = np.asarray(x, dtype=np.float64) - np.asarray(theta, dtype=np.float64)
    return -0.5 * np.sum(d**2, axis=-1) / NOISE_VAR - 0.5 * DIM * np.log(2.0 * np.pi * NOISE_VAR)


def log_prior(theta: np.ndarray) -> np.ndarray:
    """log p(theta): theta (..., 10) -> float64 (...)."""
    theta = np.asarray(theta, dtype=np.float64)
    return -0.5 * np.sum(theta**2, axis=-1) / PRIOR_VAR - 0.5 * DIM * np.log(
        2.0 * np.pi * PRIOR_VAR
    )


def analytic_posterior(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean (10,) and covariance (10, 10) of theta | x."""
    var = 1.0 / (1.0 / PRIOR_VAR + 1.0 / NOISE_VAR)
    return var / NOISE_VAR * np.asarray(x, dtype=np.float64), var * np.eye(DIM)


class GaussianNoise:
    """The simulator Kestrel calls: theta float64 (n, 10) -> x = theta + N(0, variance I)."""

    def __init__(self, variance: float = NOISE_VAR):
        self.std = float(np.sqrt(variance))

    def simulate_batch(self, n, theta, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        theta = np.asarray(theta, dtype=np.float64)
        return theta + self.std * rng.standard_normal(theta.shape)
