"""Example 05: linear regression on a sine basis.

theta ~ N(0, I_10);  mu = Phi theta with Phi_ik = sin((k + 1) t_i), t = 1000 points equispaced
on [0, 2 pi);  x = mu + N(0, sigma^2 I), sigma = 0.1. The posterior is Gaussian:
Sigma = (Phi^T Phi / sigma^2 + I)^-1,  mu_post = Sigma Phi^T x / sigma^2.
"""

import numpy as np

N_BINS = 1000
N_PARAMS = 10


def design_matrix(n_bins: int = N_BINS, n_params: int = N_PARAMS) -> np.ndarray:
    """Phi, float64 (n_bins, n_params): Phi[i, k] = sin((k + 1) t_i), t on [0, 2 pi)."""
    t = np.linspace(0.0, 2.0 * np.pi, n_bins, endpoint=False)
    return np.sin(np.outer(t, np.arange(1, n_params + 1)))


def analytic_posterior(
    x: np.ndarray, sigma: float, phi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean (D,) and covariance (D, D) of theta | x under the N(0, I) prior."""
    precision = phi.T @ phi / sigma**2 + np.eye(phi.shape[1])
    cov = np.linalg.inv(precision)
    cov = 0.5 * (cov + cov.T)
    return cov @ phi.T @ x / sigma**2, cov


class Signal:
    """mu = theta @ Phi^T: theta float64 (n, 10) -> mu float64 (n, 1000)."""

    def __init__(self, n_bins: int = N_BINS, n_params: int = N_PARAMS):
        self.phi = design_matrix(n_bins, n_params)

    def simulate_batch(self, n, theta):
        return np.asarray(theta, dtype=np.float64) @ self.phi.T


class Noise:
    """x = mu + sigma * N(0, 1): mu float64 (n, 1000) -> x float64 (n, 1000)."""

    def __init__(self, sigma: float = 0.1):
        self.sigma = float(sigma)

    def simulate_batch(self, n, mu, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return mu + self.sigma * rng.standard_normal(mu.shape)
