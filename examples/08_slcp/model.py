"""Example 08: the SLCP task of the SBI benchmark (simple likelihood, complex posterior).

theta ~ U(-3, 3)^5. The mean m = (theta_0, theta_1), the scales s_1 = theta_2^2,
s_2 = theta_3^2 and the correlation rho = tanh(theta_4) define a bivariate normal with
covariance S = [[s_1^2, rho s_1 s_2], [rho s_1 s_2, s_2^2]] + 1e-6 I; x holds four independent
draws from N(m, S), flattened row by row (x has 8 entries). The likelihood is a product of four
bivariate normals, exact and cheap; the posterior has four symmetric modes (the signs of
theta_2 and theta_3 are not identified) and sharp ridges.
"""

import numpy as np

N_DRAWS = 4
JITTER = 1e-6


def covariance(theta: np.ndarray) -> np.ndarray:
    """S of each theta: float (..., 5) -> float64 (..., 2, 2)."""
    theta = np.asarray(theta, dtype=np.float64)
    s1, s2 = theta[..., 2] ** 2, theta[..., 3] ** 2
    rho = np.tanh(theta[..., 4])
    cov = np.empty(theta.shape[:-1] + (2, 2))
    cov[..., 0, 0] = s1**2 + JITTER
    cov[..., 1, 1] = s2**2 + JITTER
    cov[..., 0, 1] = cov[..., 1, 0] = rho * s1 * s2
    return cov


def log_likelihood(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log p(x | theta), exact: theta (..., 5), x (8,) -> float64 (...)."""
    theta = np.asarray(theta, dtype=np.float64)
    cov = covariance(theta)
    a, b, c = cov[..., 0, 0], cov[..., 0, 1], cov[..., 1, 1]
    det = a * c - b * b
    d = np.asarray(x, dtype=np.float64).reshape(N_DRAWS, 2) - theta[..., None, :2]  # (..., 4, 2)
    u, v = d[..., 0], d[..., 1]
    quad = c[..., None] * u**2 - 2.0 * b[..., None] * u * v + a[..., None] * v**2  # (..., 4)
    quad = quad.sum(-1) / det
    return -0.5 * quad - 0.5 * N_DRAWS * np.log(det) - N_DRAWS * np.log(2.0 * np.pi)


class SLCP:
    """The simulator Kestrel calls: theta float64 (n, 5) -> x float64 (n, 8)."""

    def simulate_batch(self, n, theta, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        chol = np.linalg.cholesky(covariance(theta))  # (n, 2, 2)
        eps = rng.standard_normal((n, N_DRAWS, 2))
        draws = np.asarray(theta, dtype=np.float64)[:, None, :2] + np.einsum(
            "nij,nkj->nki", chol, eps
        )
        return draws.reshape(n, 2 * N_DRAWS)
