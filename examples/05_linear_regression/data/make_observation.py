"""Write data/obs.npz for example 05 (seed 42): the observation and its analytic posterior.

Keys: x (1000,), theta_true (10,), posterior_mean (10,), posterior_cov (10, 10).
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from model import N_PARAMS, Noise, Signal, analytic_posterior  # noqa: E402

SEED = 42
SIGMA = 0.1


def make(seed: int = SEED) -> dict[str, np.ndarray]:
    """The observation drawn from the model with ``seed``, and its exact posterior."""
    rng = np.random.default_rng(seed)
    theta_true = rng.standard_normal(N_PARAMS)
    signal = Signal()
    mu = signal.simulate_batch(1, theta_true[None])
    x = Noise(SIGMA).simulate_batch(1, mu, rng=rng)[0]
    mean, cov = analytic_posterior(x, SIGMA, signal.phi)
    return {"x": x, "theta_true": theta_true, "posterior_mean": mean, "posterior_cov": cov}


def main() -> None:
    out = HERE / "obs.npz"
    arrays = make()
    np.savez(out, **arrays)
    print(f"wrote {out}: theta_true={np.round(arrays['theta_true'], 3)}")
    print(f"posterior std: {np.round(np.sqrt(np.diag(arrays['posterior_cov'])), 5)}")


if __name__ == "__main__":
    main()
