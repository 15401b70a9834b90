"""The SIR task of the SBI benchmark (Lueckmann et al. 2021; ``sbibm`` 1.1's ``sir``).

An epidemic in a population of N = 10^6 with one infected person at day 0:
S' = -beta S I / N, I' = beta S I / N - gamma I, R' = gamma I, solved over 160 days. The data
are 10 noisy counts of the infected: on days 0, 17, 34, ..., 153 (every 17th of the 161 daily
values), x_k ~ Binomial(1000, I(t_k) / N). Parameters theta = (beta, gamma), the contact rate
and the recovery rate (1/days), with the benchmark's priors beta ~ LogNormal(log 0.4, 0.5),
gamma ~ LogNormal(log 1/8, 0.2) (``config.yml``). The benchmark solves the ODE in Julia; this is
scipy's adaptive Runge-Kutta, one system for a chunk (tolerances 1e-8 relative: the infected
share differs from per-sample solves by < 1e-5, far below the binomial noise).
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

POPULATION = 1_000_000.0
DAYS = 160.0
#: the observed days: every 17th of the daily values 0 ... 160
OBSERVED_DAYS = np.arange(0.0, DAYS + 1.0)[::17]
TRIALS = 1000


def infected(theta: np.ndarray) -> np.ndarray:
    """I(t) on :data:`OBSERVED_DAYS` for theta float64 ``(n, 2)`` (beta, gamma) -> ``(n, 10)``."""
    theta = np.asarray(theta, dtype=np.float64).reshape(-1, 2)
    beta, gamma = theta[:, 0], theta[:, 1]
    n = len(theta)

    def rates(_t: float, y: np.ndarray) -> np.ndarray:
        s, i = y[:n], y[n : 2 * n]
        new = beta * s * i / POPULATION
        return np.concatenate([-new, new - gamma * i, gamma * i])

    start = np.concatenate([np.full(n, POPULATION - 1.0), np.ones(n), np.zeros(n)])
    solved = solve_ivp(
        rates, (0.0, DAYS), start, t_eval=OBSERVED_DAYS, rtol=1e-8, atol=1e-6, method="RK45"
    )
    if not solved.success:
        raise RuntimeError(f"SIR: the ODE solver failed ({solved.message})")
    return solved.y[n : 2 * n]


class SIR:
    """The simulator Kestrel calls: theta float64 ``(n, 2)`` -> counts float64 ``(n, 10)``."""

    def simulate_batch(self, n, theta, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        share = np.clip(infected(theta) / POPULATION, 0.0, 1.0)
        return rng.binomial(TRIALS, share).astype(np.float64)
