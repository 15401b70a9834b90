"""Write data/obs.npz for example 06 (seed 6): the observed counts and the grid posterior.

The likelihood of the model is exact (Poisson counts around a deterministic SIR curve), so the
posterior of theta = (beta, gamma) under the uniform prior of config.yml is computed on a grid:
first a coarse grid over the whole prior box, then a fine grid of 401 x 401 points over ±8
posterior σ around the coarse mean. Its error is that of the grid (far below 1 % of σ).

Keys: x (60,), theta_true (2,), posterior_mean (2,), posterior_std (2,), posterior_cov (2, 2),
reference_samples (20000, 2) drawn from the grid (cell chosen by its mass, uniform within it).
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from model import SIR, log_likelihood  # noqa: E402

SEED = 6
THETA_TRUE = np.array([0.4, 0.15])  # beta, gamma: R0 = 2.67
PRIOR_BOX = np.array([[0.1, 1.0], [0.05, 0.5]])  # must match config.yml
N_REFERENCE = 20_000


def _grid(x: np.ndarray, box: np.ndarray, n: int):
    """Normalised posterior mass on an n x n grid of cell centres inside ``box``."""
    axes = [lo + (np.arange(n) + 0.5) * (hi - lo) / n for lo, hi in box]
    b, g = np.meshgrid(*axes, indexing="ij")
    theta = np.stack([b, g], axis=-1)
    logp = np.concatenate([log_likelihood(theta[k : k + 50], x) for k in range(0, n, 50)])
    p = np.exp(logp - logp.max())
    return theta, p / p.sum()


def _moments(theta: np.ndarray, p: np.ndarray):
    flat, w = theta.reshape(-1, 2), p.ravel()
    mean = w @ flat
    dev = flat - mean
    return mean, (dev * w[:, None]).T @ dev


def grid_posterior(
    x: np.ndarray, n: int = 401, coarse: int = 400, seed: int = SEED
) -> dict[str, np.ndarray]:
    """Mean (2,), σ (2,), covariance (2, 2) and reference samples of theta | x on a grid."""
    theta, p = _grid(x, PRIOR_BOX, coarse)
    mean, cov = _moments(theta, p)
    std = np.sqrt(np.diag(cov))
    box = np.stack([mean - 8 * std, mean + 8 * std], axis=1)
    box = np.stack(
        [np.maximum(box[:, 0], PRIOR_BOX[:, 0]), np.minimum(box[:, 1], PRIOR_BOX[:, 1])], 1
    )
    theta, p = _grid(x, box, n)
    mean, cov = _moments(theta, p)
    rng = np.random.default_rng(seed + 1)
    cells = rng.choice(p.size, size=N_REFERENCE, p=p.ravel())
    width = (box[:, 1] - box[:, 0]) / n
    samples = theta.reshape(-1, 2)[cells] + (rng.random((N_REFERENCE, 2)) - 0.5) * width
    return {
        "posterior_mean": mean,
        "posterior_std": np.sqrt(np.diag(cov)),
        "posterior_cov": cov,
        "reference_samples": samples,
    }


def make(seed: int = SEED) -> dict[str, np.ndarray]:
    """The observation simulated at THETA_TRUE with ``seed``, and its grid posterior."""
    rng = np.random.default_rng(seed)
    x = SIR().simulate_batch(1, THETA_TRUE[None], rng=rng)[0]
    return {"x": x, "theta_true": THETA_TRUE.copy(), **grid_posterior(x)}


def main() -> None:
    out = HERE / "obs.npz"
    arrays = make()
    np.savez(out, **arrays)
    print(f"wrote {out}: {int(arrays['x'].sum())} cases in {arrays['x'].size} days")
    print(f"theta_true     = {arrays['theta_true']}")
    print(f"posterior mean = {np.round(arrays['posterior_mean'], 5)}")
    print(f"posterior σ    = {np.round(arrays['posterior_std'], 5)}")


if __name__ == "__main__":
    main()
