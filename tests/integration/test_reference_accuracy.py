"""Examples 07 (two moons) and 08 (SLCP) of the SBI benchmark scored by C2ST against their
references, within CI's budget.

The example's own config spends 10 000 simulations (C2ST measured in
``examples/07_two_moons/README.md``); CI launches it with :data:`SHORT` — a smaller buffer,
:data:`EPOCHS` epochs, :data:`N` posterior samples — and requires a C2ST against N reference
samples below :data:`MAX_C2ST_SHORT` (the classifier then sees fewer samples; 0.5 is perfect).
A posterior that keeps the prior's shape, misses a crescent or blurs both scores far above it.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from kestrel import launch
from kestrel_core import c2st

from .helpers import EXAMPLES, example

#: epochs of the short run (the config's max_epochs is 200); 35 left the run short of
#: converged, its score on the rounding of the CPU it ran on (see MAX_C2ST_SHORT)
EPOCHS = 50
#: posterior and reference samples compared
N = 2000
#: the short run: 400 + 400 simulations from the prior, then 100 after every epoch (2800 in
#: all); a faster learning rate and smaller batches than the config's, for the few epochs
SHORT = [
    "buffer.min_samples=400",
    "buffer.max_samples=2400",
    "buffer.validation_samples=400",
    f"graph.theta.estimator.max_epochs={EPOCHS}",
    "graph.theta.estimator.lr=3e-3",
    "graph.theta.estimator.batch_size=64",
    f"sample.posterior.n={N}",
]
#: the bound of the short run's C2ST. The run is deterministic (rounds paced by epochs), but its
#: float32 training rounds differently on another CPU: at 35 epochs seed 1 gave 0.638 on one
#: machine and 0.723 on an AVX-512 one (seeds 2, 3: 0.589, 0.545 and 0.602, 0.590) — an
#: under-trained run sits near the bound. At 50 epochs (the AVX-512 machine, 2026-12-01):
#: seeds 1, 2, 3 give 0.544, 0.578, 0.568; launches of 50–53 s, scoring 6–19 s. On this 2-core
#: machine (2026-12-02) seed 1 gave 0.628 with the flow before it had an affine layer next to
#: its base, 0.549 (launch 45 s, scoring 12 s) with it; 0.569 (launch 45 s) on 2026-12-04. A
#: posterior with only one of the two crescents scores about 0.75, one still shaped like the
#: prior about 1.0.
MAX_C2ST_SHORT = 0.70
#: seconds before a graceful stop, should a loaded machine be very slow: a safety net only (the
#: launch takes 45–53 s); a run it stops trains fewer epochs than EPOCHS, is no longer the
#: measured one, and fails the test
CAP = 240


def short_run_c2st(task: str, overrides: list[str], cap: float, tmp_path) -> float:
    """Launch ``task``'s config with ``overrides`` (seed 1, rounds paced by epochs: the same run
    whatever the load; a graceful stop after ``cap`` s only as a safety net: a run it stops
    fails), score its posterior against :data:`N` reference samples and print what the run
    took."""
    pytest.importorskip("sklearn", reason="kestrel-core[diagnostics] not installed")
    start = time.monotonic()
    result = launch(
        example(task),
        tmp_path / "run",
        overrides=overrides,
        seed=1,
        timeout=cap,
        progress=False,
        deterministic=True,
    )
    # a run the cap stopped trained fewer epochs than the measured one: fail, do not score it
    assert result.status == "completed", (
        f"{task}: the run ended {result.status!r} after {result.epochs} epochs in "
        f"{result.wall_time:.0f} s, not by its epochs: the {cap} s cap is only a safety net"
    )
    with np.load(result.samples["posterior"]) as data:
        theta = data["theta"]
    with np.load(EXAMPLES / task / "data" / "obs.npz") as obs:
        reference = obs["reference_samples"][:N]
    launched = time.monotonic() - start
    score = c2st(reference, theta)
    print(
        f"{task}: launch {launched:.0f} s, {result.epochs['theta']} epochs, {result.simulated} "
        f"simulations, C2ST {score:.3f} ({time.monotonic() - start - launched:.0f} s)"
    )
    return score


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_07_two_moons_c2st_against_the_reference(tmp_path, no_leaked_actors):
    score = short_run_c2st("07_two_moons", SHORT, CAP, tmp_path)
    assert score <= MAX_C2ST_SHORT, f"C2ST {score:.3f} > {MAX_C2ST_SHORT}"


#: epochs of SLCP's short run (its config's max_epochs is 200)
EPOCHS_08 = 60
#: SLCP's short run (its config's FlowLikelihood): 1000 + 500 simulations from the prior, then
#: 100 after every epoch up to 5000 training samples (5500 in all)
SHORT_08 = [
    "buffer.min_samples=1000",
    "buffer.max_samples=5000",
    "buffer.validation_samples=500",
    f"graph.theta.estimator.max_epochs={EPOCHS_08}",
    f"sample.posterior.n={N}",
]
#: the bound of SLCP's short run, seed 1 (2026-12-03): this run scored 0.787 (launch 94 s;
#: 0.728 in 88 s on the 2-core machine, 2026-12-04);
#: shorter ones scored higher — 40 epochs 0.895 (500 + 500 prior simulations) and 0.879
#: (rounds of 200), 60 epochs with rounds of 200 0.834. A posterior that misses modes or keeps
#: the prior's width in θ₂, θ₃ scores far above the bound; the posterior flow scores 0.86–0.88
#: with all 10 000 simulations.
MAX_C2ST_SHORT_08 = 0.85
#: SLCP's safety cap (seconds; the launch takes 88–94 s): a run it stops fails the test
CAP_08 = 400


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_08_slcp_likelihood_c2st_against_the_reference(tmp_path, no_leaked_actors):
    score = short_run_c2st("08_slcp", SHORT_08, CAP_08, tmp_path)
    assert score <= MAX_C2ST_SHORT_08, f"C2ST {score:.3f} > {MAX_C2ST_SHORT_08}"
