"""Write data/obs.npz for example 08: observation 1 of the SLCP task and its reference.

The observation and the true parameters are those of the benchmark (sbibm 1.1, observation 1,
float32 precision). The reference posterior is sampled here, from the exact likelihood of
model.py, with a random-walk Metropolis sampler written with numpy:

* The likelihood depends on theta_2 and theta_3 only through their squares and the prior is
  symmetric, so the posterior is the same in each of the four sign orthants of
  (theta_2, theta_3). The chains run on the folded posterior (theta_2, theta_3 > 0), which has
  one mode; each kept sample then gets independent random signs for theta_2 and theta_3.
* ``CHAINS`` chains start from prior draws resampled by their likelihood; during ``BURN_IN``
  steps the Gaussian proposal's covariance is set every 250 steps to 2.38² / 5 times the
  covariance of the chains' states (the classic optimal scaling); it is then fixed, and each
  chain keeps one state every ``THIN`` steps. A proposal outside the prior box is rejected.

Keys: x (8,), theta_true (5,), reference_samples (10000, 5) float32, posterior_mean (5,),
posterior_std (5,) (of the reference samples), acceptance (the sampler's acceptance rate).
About 10 s on 2 cores.
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from model import log_likelihood  # noqa: E402

SEED = 8
#: observation 1 of the benchmark and the parameters that simulated it
X_OBS = np.array(
    [
        2.3718783855438232,
        0.4994741678237915,
        9.931434631347656,
        1.713691234588623,
        -10.436423301696777,
        -1.9067792892456055,
        -1.2343777418136597,
        -0.09735000133514404,
    ]
)
THETA_TRUE = np.array([-2.8581212, -0.44451332, 2.9473476, 1.2396116, 2.9712725])
LOW, HIGH = -3.0, 3.0  # the prior box of every component; must match config.yml
DIM = 5
N_REFERENCE = 10_000
CHAINS = 1000
BURN_IN = 5000
THIN = 200
START_DRAWS = 500_000


def _folded_log_post(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Log posterior (up to a constant) on the folded box: theta_2, theta_3 in (0, 3]."""
    inside = np.all((theta >= LOW) & (theta <= HIGH), axis=-1)
    inside &= (theta[..., 2] > 0.0) & (theta[..., 3] > 0.0)
    out = np.full(theta.shape[:-1], -np.inf)
    out[inside] = log_likelihood(theta[inside], x)
    return out


def _starts(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """CHAINS starting points: folded prior draws resampled by their likelihood."""
    theta = rng.uniform(LOW, HIGH, size=(START_DRAWS, DIM))
    theta[:, 2:4] = np.abs(theta[:, 2:4])
    logw = log_likelihood(theta, x)
    w = np.exp(logw - logw.max())
    return theta[rng.choice(START_DRAWS, size=CHAINS, p=w / w.sum())]


def reference_posterior(
    x: np.ndarray, n: int = N_REFERENCE, seed: int = SEED
) -> tuple[np.ndarray, float]:
    """``n`` posterior samples of theta | x, float64 (n, 5), and the acceptance rate."""
    rng = np.random.default_rng(seed)
    state = _starts(x, rng)
    logp = _folded_log_post(state, x)
    chol = np.linalg.cholesky(np.cov(state.T) * 2.38**2 / DIM + 1e-9 * np.eye(DIM))
    per_chain = -(-n // CHAINS)
    kept, accepted, steps = [], 0, 0
    for step in range(BURN_IN + per_chain * THIN):
        proposal = state + rng.standard_normal((CHAINS, DIM)) @ chol.T
        logq = _folded_log_post(proposal, x)
        accept = np.log(rng.random(CHAINS)) < logq - logp
        state[accept], logp[accept] = proposal[accept], logq[accept]
        if step < BURN_IN:
            if (step + 1) % 250 == 0:
                cov = np.cov(state.T) * 2.38**2 / DIM
                chol = np.linalg.cholesky(cov + 1e-9 * np.eye(DIM))
            continue
        accepted += int(accept.sum())
        steps += CHAINS
        if (step - BURN_IN + 1) % THIN == 0:
            kept.append(state.copy())
    samples = np.concatenate(kept)[:n]
    signs = rng.choice([-1.0, 1.0], size=(len(samples), 2))
    samples[:, 2:4] *= signs
    return samples, accepted / steps


def make(seed: int = SEED) -> dict[str, np.ndarray]:
    """The benchmark's observation 1, its true parameters and the reference posterior."""
    samples, acceptance = reference_posterior(X_OBS, seed=seed)
    return {
        "x": X_OBS.copy(),
        "theta_true": THETA_TRUE.copy(),
        "reference_samples": samples.astype(np.float32),
        "posterior_mean": samples.mean(0),
        "posterior_std": samples.std(0, ddof=1),
        "acceptance": np.array(acceptance),
    }


def main() -> None:
    out = HERE / "obs.npz"
    arrays = make()
    np.savez(out, **arrays)
    print(f"wrote {out}: {len(arrays['reference_samples'])} reference samples")
    print(f"acceptance rate = {float(arrays['acceptance']):.3f}")
    print(f"posterior mean  = {np.round(arrays['posterior_mean'], 4)}")
    print(f"posterior σ     = {np.round(arrays['posterior_std'], 4)}")


if __name__ == "__main__":
    main()
