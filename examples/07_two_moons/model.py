"""Example 07: the two-moons task of the SBI benchmark (Lueckmann et al. 2021).

theta ~ U(-1, 1)^2. A point on a half circle, a ~ U(-pi/2, pi/2), r ~ N(0.1, 0.01^2),
p = (r cos a + 0.25, r sin a), is shifted by the rotated parameters z = R theta
(R the rotation by -pi/4): x = p + (-|z_0|, z_1). Because of |z_0| every observation has two
crescent-shaped posterior modes, mirror images of each other.

The likelihood is tractable: p = x - (-|z_0|, z_1) must lie on the right half plane around
(0.25, 0), and in polar coordinates (r, a) about that centre its density is
N(r; 0.1, 0.01^2) / (pi r)  (the 1/r is the Jacobian of the polar map).
"""

import numpy as np

RADIUS_MEAN = 0.1
RADIUS_STD = 0.01
CENTRE = 0.25
ANGLE = -np.pi / 4.0


def rotate(theta: np.ndarray) -> np.ndarray:
    """z = R theta, R the rotation by -pi/4: theta float (..., 2) -> float64 (..., 2)."""
    theta = np.asarray(theta, dtype=np.float64)
    c, s = np.cos(ANGLE), np.sin(ANGLE)
    return np.stack(
        [c * theta[..., 0] - s * theta[..., 1], s * theta[..., 0] + c * theta[..., 1]], axis=-1
    )


def shift(theta: np.ndarray) -> np.ndarray:
    """The deterministic part of x: (-|z_0|, z_1), float64 (..., 2)."""
    z = rotate(theta)
    return np.stack([-np.abs(z[..., 0]), z[..., 1]], axis=-1)


def log_likelihood(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log p(x | theta), exact: theta (..., 2) and x (..., 2), broadcast against each other,
    -> float64 (...); -inf where x - shift(theta) is off the half circle's side."""
    p = np.asarray(x, dtype=np.float64) - shift(theta)
    u, v = p[..., 0] - CENTRE, p[..., 1]
    r = np.hypot(u, v)
    with np.errstate(divide="ignore"):
        logp = (
            -0.5 * ((r - RADIUS_MEAN) / RADIUS_STD) ** 2
            - np.log(RADIUS_STD * np.sqrt(2.0 * np.pi))
            - np.log(np.pi * r)
        )
    return np.where(u > 0.0, logp, -np.inf)


def max_log_likelihood() -> float:
    """The supremum of :func:`log_likelihood` over theta and x (the bound of rejection sampling).

    N(r; mu, s^2) / (pi r) is largest where r^2 - mu r + s^2 = 0, at r = (mu + sqrt(mu^2 - 4 s^2)) / 2.
    """
    mu, s = RADIUS_MEAN, RADIUS_STD
    r = 0.5 * (mu + np.sqrt(mu**2 - 4.0 * s**2))
    return float(-0.5 * ((r - mu) / s) ** 2 - np.log(s * np.sqrt(2.0 * np.pi)) - np.log(np.pi * r))


class TwoMoons:
    """The simulator Kestrel calls: theta float64 (n, 2) -> x float64 (n, 2)."""

    def simulate_batch(self, n, theta, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        a = rng.uniform(-np.pi / 2.0, np.pi / 2.0, size=n)
        r = rng.normal(RADIUS_MEAN, RADIUS_STD, size=n)
        p = np.stack([r * np.cos(a) + CENTRE, r * np.sin(a)], axis=-1)
        return p + shift(theta)
