"""Write data/obs.npz for example 07: observation 1 of the two-moons task and its reference.

The observation and the true parameters are those of the benchmark (sbibm 1.1, observation 1,
float32 precision). The reference posterior is sampled here, from the exact likelihood of
model.py, by rejection from the uniform prior: a prior draw theta is kept with probability
p(x | theta) / M, where M is the likelihood's analytic supremum (model.max_log_likelihood).
The kept draws are exact, independent posterior samples; about 0.4 % of the prior draws are
kept, so 10 000 samples take about 2.5 million likelihood evaluations (about 2 s).

Keys: x (2,), theta_true (2,), reference_samples (10000, 2) float32,
posterior_mean (2,), posterior_std (2,) (of the reference samples).
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from model import log_likelihood, max_log_likelihood  # noqa: E402

SEED = 7
#: observation 1 of the benchmark and the parameters that simulated it
X_OBS = np.array([-0.6396706104278564, 0.16234657168388367])
THETA_TRUE = np.array([-0.8176656, -0.5756806])
PRIOR_BOX = np.array([[-1.0, 1.0], [-1.0, 1.0]])  # must match config.yml
N_REFERENCE = 10_000
CHUNK = 500_000


def reference_posterior(x: np.ndarray, n: int = N_REFERENCE, seed: int = SEED) -> np.ndarray:
    """``n`` exact posterior samples of theta | x, float64 (n, 2), by rejection from the prior."""
    rng = np.random.default_rng(seed)
    bound = max_log_likelihood()
    kept: list[np.ndarray] = []
    total = 0
    while total < n:
        theta = rng.uniform(PRIOR_BOX[:, 0], PRIOR_BOX[:, 1], size=(CHUNK, 2))
        keep = np.log(rng.random(CHUNK)) < log_likelihood(theta, x) - bound
        kept.append(theta[keep])
        total += int(keep.sum())
    return np.concatenate(kept)[:n]


def make(seed: int = SEED) -> dict[str, np.ndarray]:
    """The benchmark's observation 1, its true parameters and the reference posterior."""
    samples = reference_posterior(X_OBS, seed=seed)
    return {
        "x": X_OBS.copy(),
        "theta_true": THETA_TRUE.copy(),
        "reference_samples": samples.astype(np.float32),
        "posterior_mean": samples.mean(0),
        "posterior_std": samples.std(0, ddof=1),
    }


def main() -> None:
    out = HERE / "obs.npz"
    arrays = make()
    np.savez(out, **arrays)
    print(f"wrote {out}: x = {arrays['x']}, {len(arrays['reference_samples'])} reference samples")
    print(f"posterior mean = {np.round(arrays['posterior_mean'], 4)}")
    print(f"posterior σ    = {np.round(arrays['posterior_std'], 4)}")


if __name__ == "__main__":
    main()
