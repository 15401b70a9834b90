"""Core layer: kestrel-core's InMemoryStore (the store of the GPU benchmarks and small jobs).

Group ``memory_fetch`` (reported, not gated): read N stored samples of θ, μ, x.
* baseline — a per-sample store (one dict of arrays per sample id), read by stacking N rows;
* Kestrel — ``InMemoryStore.view().fetch``: one checkout, one fancy-index copy per block.
"""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_bench import BASELINE, DATA_KEYS, KESTREL, SIZES, StoreRig, label
from kestrel_core import TRAINABLE, InMemoryStore

N_IDS = [f"N={n}" for n in SIZES]


@pytest.fixture(scope="module", params=SIZES, ids=N_IDS)
def memory_rig(request):
    n = request.param
    rig = StoreRig("memory", {"min_samples": 0, "max_samples": n, "validation_samples": 0}, n=n)
    rig.append_set()
    return rig


def test_memory_fetch_baseline(benchmark, memory_rig):
    n = memory_rig.n
    label(benchmark, "memory_fetch", BASELINE, n, baseline="per-sample dicts + np.stack")
    per_sample = [{k: memory_rig.arrays[k][i].copy() for k in DATA_KEYS} for i in range(n)]

    def read():
        return {k: np.stack([s[k] for s in per_sample]) for k in DATA_KEYS}

    out = benchmark.pedantic(read, rounds=3 if n > 1024 else 10, warmup_rounds=1)
    np.testing.assert_array_equal(out["x.value"], memory_rig.arrays["x.value"])


def test_memory_fetch_kestrel(benchmark, memory_rig):
    n = memory_rig.n
    label(benchmark, "memory_fetch", KESTREL, n, backend=type(memory_rig.store).__name__)
    assert isinstance(memory_rig.store, InMemoryStore)
    view = memory_rig.view
    out = benchmark.pedantic(
        lambda: view.fetch(TRAINABLE, DATA_KEYS), rounds=5 if n > 1024 else 20, warmup_rounds=1
    )
    assert len(out.new_ids) == n
    np.testing.assert_array_equal(out.arrays["x.value"], memory_rig.arrays["x.value"])
