"""Helpers of the end-to-end tests (paths, tiny budgets, subprocess ``kestrel``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
KESTREL = [sys.executable, "-m", "kestrel_core._cli"]

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


def alive_actors() -> set[str]:
    """Ids of the ALIVE actors of the session's Ray."""
    import ray

    return {k for k, v in ray._private.state.actors().items() if v["State"] == "ALIVE"}


def wait_dead(ids: set[str], timeout: float = 10.0) -> set[str]:
    """Wait until none of ``ids`` is alive; return those still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    left = ids & alive_actors()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = ids & alive_actors()
    return left


def kestrel_env(**extra: str) -> dict[str, str]:
    """The environment of a ``kestrel`` subprocess: no inherited cluster address."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def run_kestrel(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """``kestrel ARGS`` in a subprocess (it starts and stops its own Ray), output as text."""
    return subprocess.run([*KESTREL, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env or kestrel_env(), cwd=str(REPO))


def analytic_05() -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and standard deviations of example 05 (from its observation file)."""
    with np.load(EXAMPLES / "05_linear_regression" / "data" / "obs.npz") as obs:
        return obs["posterior_mean"], np.sqrt(np.diag(obs["posterior_cov"]))
