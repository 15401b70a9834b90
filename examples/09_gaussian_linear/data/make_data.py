"""Write data/obs.npz for example 09: observation 1 of the Gaussian linear task and its reference.

The observation and the true parameters are those of the benchmark (sbibm 1.1, observation 1,
float32 precision). The reference posterior samples are drawn here from the likelihood and
prior of model.py with a random-walk Metropolis sampler written with numpy, as for a task
without a closed form (the analytic posterior N(x/2, 0.05 I), stored beside them, is what
tests/integration/test_reference_tasks.py checks them against): ``CHAINS`` chains start from
prior draws; during ``BURN_IN`` steps the Gaussian proposal's covariance is set every 250 steps
to 2.38² / 10 times the covariance of the chains' states; then each chain keeps one state every
``THIN`` steps.

Keys: x (10,), theta_true (10,), reference_samples (10000, 10) float32, posterior_mean (10,),
posterior_cov (10, 10) (analytic), acceptance (the sampler's acceptance rate). About 5 s.
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from model import DIM, PRIOR_VAR, analytic_posterior, log_likelihood, log_prior  # noqa: E402

SEED = 9
#: observation 1 of the benchmark and the parameters that simulated it
X_OBS = np.array(
    [
        1.0471346378326416,
        0.5566712021827698,
        -0.23618453741073608,
        0.027879834175109863,
        -1.0051445960998535,
        -0.007930746302008629,
        0.06117077171802521,
        -0.29286885261535645,
        -0.38539963960647583,
        0.24496139585971832,
    ]
)
THETA_TRUE = np.array(
    [
        0.27184236,
        0.6762953,
        0.17189318,
        -0.04218617,
        -0.82151634,
        0.024290232,
        -0.24255924,
        -0.16438946,
        -0.13595216,
        0.26958188,
    ]
)
N_REFERENCE = 10_000
CHAINS = 1000
BURN_IN = 2000
THIN = 100


def _log_post(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    return log_likelihood(theta, x) + log_prior(theta)


def reference_posterior(
    x: np.ndarray, n: int = N_REFERENCE, seed: int = SEED
) -> tuple[np.ndarray, float]:
    """``n`` posterior samples of theta | x, float64 (n, 10), and the acceptance rate."""
    rng = np.random.default_rng(seed)
    state = np.sqrt(PRIOR_VAR) * rng.standard_normal((CHAINS, DIM))
    logp = _log_post(state, x)
    chol = np.sqrt(PRIOR_VAR * 2.38**2 / DIM) * np.eye(DIM)
    per_chain = -(-n // CHAINS)
    kept, accepted, steps = [], 0, 0
    for step in range(BURN_IN + per_chain * THIN):
        proposal = state + rng.standard_normal((CHAINS, DIM)) @ chol.T
        logq = _log_post(proposal, x)
        accept = np.log(rng.random(CHAINS)) < logq - logp
        state[accept], logp[accept] = proposal[accept], logq[accept]
        if step < BURN_IN:
            if (step + 1) % 250 == 0:
                chol = np.linalg.cholesky(np.cov(state.T) * 2.38**2 / DIM)
            continue
        accepted += int(accept.sum())
        steps += CHAINS
        if (step - BURN_IN + 1) % THIN == 0:
            kept.append(state.copy())
    return np.concatenate(kept)[:n], accepted / steps


def make(seed: int = SEED) -> dict[str, np.ndarray]:
    """The benchmark's observation 1, its true parameters, the reference and exact posterior."""
    samples, acceptance = reference_posterior(X_OBS, seed=seed)
    mean, cov = analytic_posterior(X_OBS)
    return {
        "x": X_OBS.copy(),
        "theta_true": THETA_TRUE.copy(),
        "reference_samples": samples.astype(np.float32),
        "posterior_mean": mean,
        "posterior_cov": cov,
        "acceptance": np.array(acceptance),
    }


def main() -> None:
    out = HERE / "obs.npz"
    arrays = make()
    np.savez(out, **arrays)
    ref = arrays["reference_samples"].astype(np.float64)
    std = np.sqrt(np.diag(arrays["posterior_cov"]))
    print(f"wrote {out}: {len(ref)} reference samples")
    print(f"acceptance rate = {float(arrays['acceptance']):.3f}")
    print(f"mean error / σ  = {np.round((ref.mean(0) - arrays['posterior_mean']) / std, 3)}")
    print(f"σ ratio         = {np.round(ref.std(0, ddof=1) / std, 3)}")


if __name__ == "__main__":
    main()
