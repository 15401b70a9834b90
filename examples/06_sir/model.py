"""Example 06: an SIR epidemic, your own model in Kestrel.

theta = (beta, gamma): infection and recovery rates per day. The epidemic follows the
deterministic SIR equations in a closed population of ``population`` people, ``infected0`` of
them infected on day 0,

    dS/dt = -beta S I / P,   dI/dt = beta S I / P - gamma I,   dR/dt = gamma I,

integrated with a fixed-step fourth-order Runge-Kutta scheme (``steps_per_day`` steps a day).
The data are the new cases of each of ``days`` days, ``S(t-1) - S(t)``, counted with Poisson
noise. The likelihood is therefore exact and cheap, and ``data/make_data.py`` computes the
posterior on a grid.
"""

import numpy as np

POPULATION = 1000.0
INFECTED0 = 10.0
DAYS = 60
STEPS_PER_DAY = 10


def expected_cases(
    theta: np.ndarray,
    population: float = POPULATION,
    infected0: float = INFECTED0,
    days: int = DAYS,
    steps_per_day: int = STEPS_PER_DAY,
) -> np.ndarray:
    """Expected new cases per day: theta float (..., 2) -> float64 (..., days), all ≥ 0."""
    theta = np.asarray(theta, dtype=np.float64)
    beta, gamma = theta[..., 0], theta[..., 1]
    s = np.full(beta.shape, (population - infected0) / population)
    i = np.full(beta.shape, infected0 / population)
    h = 1.0 / steps_per_day

    def rates(s, i):
        infections = beta * s * i
        return -infections, infections - gamma * i

    out = np.empty(beta.shape + (days,))
    for day in range(days):
        start = s
        for _ in range(steps_per_day):
            ds1, di1 = rates(s, i)
            ds2, di2 = rates(s + 0.5 * h * ds1, i + 0.5 * h * di1)
            ds3, di3 = rates(s + 0.5 * h * ds2, i + 0.5 * h * di2)
            ds4, di4 = rates(s + h * ds3, i + h * di3)
            s = s + h / 6.0 * (ds1 + 2 * ds2 + 2 * ds3 + ds4)
            i = i + h / 6.0 * (di1 + 2 * di2 + 2 * di3 + di4)
        out[..., day] = population * (start - s)
    return np.maximum(out, 0.0)


def log_likelihood(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Poisson log-likelihood of the counts x (days,) for theta (..., 2), up to a constant."""
    rate = expected_cases(theta)
    return np.sum(x * np.log(np.maximum(rate, 1e-300)) - rate, axis=-1)


class SIR:
    """The simulator Kestrel calls: theta float64 (n, 2) -> daily counts float64 (n, days)."""

    def __init__(
        self, population: float = POPULATION, infected0: float = INFECTED0, days: int = DAYS
    ):
        self.population = float(population)
        self.infected0 = float(infected0)
        self.days = int(days)

    def simulate_batch(self, n, theta, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        rate = expected_cases(theta, self.population, self.infected0, self.days)
        return rng.poisson(rate).astype(np.float64)
