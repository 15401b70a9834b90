"""Helpers of the end-to-end tests (paths, tiny budgets, subprocess ``kestrel``).

In-process launches share the session's Ray (``ray_session`` of the ``kestrel_ray.testing``
plugin; ``no_leaked_actors`` fails a test that leaves an actor alive). Tests that need a fresh
process (Ctrl-C, a new process loading weights, a cluster) run ``kestrel`` in a subprocess,
which starts and stops its own Ray.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
KESTREL = [sys.executable, "-m", "kestrel"]

#: a tiny budget for any example: small buffer, quick rounds, few posterior samples
TINY = [
    "buffer.min_samples=64",
    "buffer.max_samples=128",
    "buffer.validation_samples=16",
    "buffer.simulate_count=16",
    "buffer.simulate_interval=0.05",
    "sample.posterior.n=7",
]


def example(name: str) -> Path:
    """The config file of ``examples/<name>``."""
    return EXAMPLES / name / "config.yml"


def tiny(config, epochs: int = 2) -> list[str]:
    """:data:`TINY` plus ``max_epochs=epochs`` for every estimator of ``config``."""
    from kestrel_core import load_config

    cfg = load_config(config)
    return TINY + [f"graph.{m}.estimator.max_epochs={epochs}" for m in cfg.graph.latents]


def kestrel_env(**extra: str) -> dict[str, str]:
    """The environment of a ``kestrel`` subprocess: no inherited cluster address."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def run_kestrel(
    *args: str, timeout: float = 240, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``kestrel ARGS`` in a subprocess (it starts and stops its own Ray), output as text."""
    return subprocess.run(
        [*KESTREL, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or kestrel_env(),
        cwd=str(REPO),
    )


def analytic_05() -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and standard deviations of example 05 (from its observation file)."""
    with np.load(EXAMPLES / "05_linear_regression" / "data" / "obs.npz") as obs:
        return obs["posterior_mean"], np.sqrt(np.diag(obs["posterior_cov"]))
