"""Shared fixtures of the Kestrel benchmarks.

* One local Ray (``num_cpus=2``) for the whole session, started by the first benchmark that
  needs it and shut down at the end; actors a benchmark starts are killed by ``track`` (both
  fixtures come from the ``kestrel_ray.testing`` plugin, installed with kestrel-ray).
* torch runs with one intra-op thread: that is what the estimator gets inside its Ray actor
  (Ray sets ``OMP_NUM_THREADS=1`` there), and on a 2-core machine shared with Ray's processes
  and the loader's thread, two OpenMP threads stall each other and make every figure noise.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch  # noqa: E402

TORCH_THREADS = 1
torch.set_num_threads(TORCH_THREADS)


@pytest.fixture(scope="session")
def per_sample_refs(ray_session):
    """``per_sample_refs(n)``: θ, μ, x of ``make_samples(n)`` as one ObjectRef per sample per key,
    as the previous system stored them (made once per N with a 4-thread pool, kept for the session)."""
    from kestrel_bench import DATA_KEYS, make_samples, put_thread_pool

    made = {}

    def get(n: int):
        if n not in made:
            samples = make_samples(n)
            made[n] = put_thread_pool({k: samples[k] for k in DATA_KEYS}, 4)
        return made[n]

    yield get
    made.clear()


def pytest_configure(config):
    """Create the folder of ``--benchmark-json`` (pytest-benchmark does not)."""
    path = config.getoption("benchmark_json", None)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
