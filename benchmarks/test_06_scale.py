"""Scale: store, fetch and the loader's groups at N = 8192–65 536, and fetch beyond the object
store's memory (spilling). Not in ``bench:check``: every test here is marked ``scale``, which
``benchmarks/pytest.ini`` deselects (``-m "not scale"``); ``hatch run bench:scale`` runs only
these (``-m scale``) and prints the gate's table and growth exponents without floors
(``python -m kestrel_bench.gate … --report``). About 8 minutes on a 2-core machine.

The groups, their labels and what they time are those of ``test_02_ray.py`` (``store``,
``fetch``) and ``test_03_torch.py`` (``fill``, ``apply_fetch``, ``sync``, ``sample_batch``; CPU,
store in Ray), on the same rigs, at :data:`~kestrel_bench.SCALE_SIZES` of example 05's sample —
θ (10,), μ (1000,), x (1000,) float64, 16 KB: N = 65 536 is 1.05 GB. The ``store`` graph is
deployed per N with replay tables of N rows (no wrap-around copies) and a store keeping the
newest N; every rig is built inside its test and closed after it, so one N's data is in memory
at a time.

Baselines skipped at the large N (they would take minutes; their rows show "—" and their
exponents span the N they ran at): the per-sample baselines of ``store`` (sequential
``ray.put`` in an actor: 18.6 s a round at N = 8192, linear in N; the 4-thread variant is not
run), ``fetch`` and ``sync`` (both read N per-sample refs a key, which the session first makes
with 3 N ``ray.put``) run at N = 8192 and 16 384 only. The ``fill``, ``apply_fetch`` and
``sample_batch`` baselines run at every N.

``fetch_spill`` — N = 2048 samples of θ (10,) and x (10⁵,) float64 (800 KB a sample, 1.6 GB),
stored twice (Kestrel's blocks of 128 rows in a SampleStore and the baseline's per-sample
refs: 3.3 GB) in a Ray of its own whose object store holds 512 MiB, so Ray spills to disk;
then each path reads all N back, alternating, 3 rounds: ``RayBufferView.fetch`` against
per-sample ``ray.get`` + ``np.stack``. Timed inside that process
(:mod:`kestrel_bench._spill`: the session's Ray cannot be given a small object store) and
reported with :func:`~kestrel_bench.pedantic_inner`; every read is compared with the data,
and the raylet's spill counters go to ``extra_info``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import ray
import torch

from kestrel_bench import (
    BASELINE,
    BLOCK_ROWS,
    DATA_KEYS,
    KESTREL,
    SCALE_SIZES,
    LoaderRig,
    NaiveNode,
    ReplayRounds,
    StoreRig,
    apply_per_sample,
    blocking_fetch_and_apply,
    check_cache,
    empty_cache,
    fetch_per_sample,
    label,
    make_samples,
    pedantic_inner,
    replay_graph,
)
from kestrel_core import TRAINABLE
from kestrel_ray import DeployedGraph

pytestmark = pytest.mark.scale

N_IDS = [f"N={n}" for n in SCALE_SIZES]
#: the per-sample baselines of store, fetch and sync run up to this N (see the docstring)
SLOW_MAX = 16384
SLOW_SIZES = [n for n in SCALE_SIZES if n <= SLOW_MAX]
SLOW_IDS = [f"N={n}" for n in SLOW_SIZES]
BATCH = 128
#: the spilling case: samples, floats of x a sample, object store MiB, reads of each path
SPILL_N, SPILL_WIDTH, SPILL_STORE_MIB, SPILL_ROUNDS = 2048, 100_000, 512, 3


def _data(n: int) -> dict[str, np.ndarray]:
    return {k: v for k, v in make_samples(n).items() if k in DATA_KEYS}


# -- fetch beyond the object store (first: before the session's Ray holds gigabytes) ----------
@pytest.fixture(scope="module")
def spilled(tmp_path_factory):
    """The JSON of one ``python -m kestrel_bench._spill`` run (its own Ray, shut down in it)."""
    out = tmp_path_factory.mktemp("spill") / "spill.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray of its own
    args = ["--n", SPILL_N, "--width", SPILL_WIDTH, "--store-mib", SPILL_STORE_MIB]
    args += ["--rounds", SPILL_ROUNDS, "--out", out]
    proc = subprocess.run(
        [sys.executable, "-m", "kestrel_bench._spill", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("role", [BASELINE, KESTREL])
def test_fetch_spill(benchmark, spilled, role):
    seconds = spilled[f"{role}_s"]
    info = {k: spilled[k] for k in ("width", "sample_bytes", "store_bytes", "spill_dir_bytes")}
    info.update({k: spilled[k] for k in ("spilled_bytes", "restored_bytes", "fallback_bytes")})
    info.update(put_s=spilled["put_s"][role], keys=["theta.value", "x.value"])
    if role == KESTREL:
        info.update(path="RayBufferView.fetch", block_rows=BLOCK_ROWS)
    else:
        info.update(baseline="per-sample ray.get + np.stack")
    label(benchmark, "fetch_spill", role, SPILL_N, **info)
    rounds = iter(seconds)
    pedantic_inner(
        benchmark,
        lambda: (next(rounds), None),
        rounds=len(seconds),
        warmup_rounds=0,
        where="in a process of its own: its own Ray, a 512 MiB object store, spilling",
    )
    assert spilled["correct"], "a read of the spilled samples differed from the data"
    assert spilled["spilled_bytes"] > spilled["store_bytes"]  # it did spill


# -- store -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SLOW_SIZES, ids=SLOW_IDS)
def test_store_baseline(benchmark, track, n):
    label(benchmark, "store", BASELINE, n, baseline="per-sample ray.put", keys=list(DATA_KEYS))
    node = track(ray.remote(NaiveNode).options(num_cpus=0).remote(n))
    ray.get(node.ready.remote())
    refs = benchmark.pedantic(lambda: ray.get(node.put.remote(0))[0], rounds=1, warmup_rounds=0)
    assert {k: len(v) for k, v in refs.items()} == {k: n for k in DATA_KEYS}


@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_store_kestrel(benchmark, ray_session, n):
    label(
        benchmark,
        "store",
        KESTREL,
        n,
        path="DeployedGraph.sample + DeployedGraph.append",
        keys=list(DATA_KEYS),
    )
    buffer = {"min_samples": 0, "max_samples": n, "validation_samples": 0}
    dg = DeployedGraph(replay_graph(rows=n), seed=0, buffer=buffer).deploy()
    try:
        store = ReplayRounds(dg, n)
        store.check(benchmark.pedantic(store, rounds=5, warmup_rounds=1))
        store.last = None
    finally:
        dg.shutdown()


# -- fetch -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SLOW_SIZES, ids=SLOW_IDS)
def test_fetch_baseline(benchmark, per_sample_refs, n):
    label(
        benchmark,
        "fetch",
        BASELINE,
        n,
        baseline="per-sample ray.get + np.stack",
        keys=list(DATA_KEYS),
    )
    refs = per_sample_refs(n)
    out = benchmark.pedantic(lambda: fetch_per_sample(refs), rounds=3, warmup_rounds=1)
    np.testing.assert_array_equal(out["x.value"], make_samples(n)["x.value"])


@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_fetch_kestrel(benchmark, ray_session, n):
    label(
        benchmark,
        "fetch",
        KESTREL,
        n,
        path="RayBufferView.fetch",
        block_rows=BLOCK_ROWS,
        keys=list(DATA_KEYS),
    )
    rig = StoreRig("ray", {"min_samples": 0, "max_samples": n, "validation_samples": 0}, n=n)
    try:
        rig.append_set()
        out = benchmark.pedantic(
            lambda: rig.view.fetch(TRAINABLE, DATA_KEYS), rounds=5, warmup_rounds=1
        )
        assert len(out.new_ids) == n
        for key in DATA_KEYS:
            np.testing.assert_array_equal(out.arrays[key], rig.arrays[key])
    finally:
        rig.close()


# -- fill ------------------------------------------------------------------------------------
FILL_BASELINES = {
    "per-sample .to(device) + torch.stack": "rows",
    "np.stack + one .to(device)": "stack",
}


@pytest.mark.parametrize("how", list(FILL_BASELINES), ids=list(FILL_BASELINES.values()))
@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_fill_baseline(benchmark, n, how):
    label(benchmark, "fill", BASELINE, n, baseline=how)
    arrays = _data(n)
    rows = {k: list(v) for k, v in arrays.items()}  # as per-sample ray.get returns them

    def fill():
        if FILL_BASELINES[how] == "rows":
            return {
                k: torch.stack([torch.as_tensor(r).to("cpu") for r in v]) for k, v in rows.items()
            }
        return {k: torch.as_tensor(np.stack(v)).to("cpu") for k, v in rows.items()}

    out = benchmark.pedantic(fill, rounds=3, warmup_rounds=1)
    np.testing.assert_array_equal(out["x.value"].numpy(), arrays["x.value"])


@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_fill_kestrel(benchmark, n):
    from kestrel_torch.data._staging import HostToDevice

    label(benchmark, "fill", KESTREL, n, path="HostToDevice.copy + wait (loader background)")
    arrays = _data(n)
    transfer = HostToDevice("cpu")

    def fill():
        out = {k: transfer.copy(v, torch.float64) for k, v in arrays.items()}
        transfer.wait()
        return out

    out = benchmark.pedantic(fill, rounds=5, warmup_rounds=1)
    np.testing.assert_array_equal(out["x.value"].numpy(), arrays["x.value"])


# -- apply_fetch -----------------------------------------------------------------------------
@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_apply_fetch_baseline(benchmark, n):
    label(
        benchmark,
        "apply_fetch",
        BASELINE,
        n,
        baseline="per-sample np.array -> torch.as_tensor -> .to(device) + scatter",
    )
    arrays = _data(n)
    samples = {k: list(v) for k, v in arrays.items()}  # N row arrays a key, as ray.get returns
    cache = empty_cache(n, "cpu")
    rows = torch.arange(n)
    benchmark.pedantic(
        lambda: apply_per_sample(cache, rows, samples, "cpu"), rounds=3, warmup_rounds=1
    )
    np.testing.assert_array_equal(cache["x.value"].numpy(), arrays["x.value"])


@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_apply_fetch_kestrel(benchmark, ray_session, n):
    label(
        benchmark,
        "apply_fetch",
        KESTREL,
        n,
        path="CachedDataLoader.sync (fetch done)",
        store="ray",
    )
    rig = LoaderRig(n, "cpu", "ray")
    try:
        applied = []
        benchmark.pedantic(
            lambda: applied.append(rig.loader.sync()),
            setup=rig.fetch_ready,
            rounds=5,
            warmup_rounds=1,
        )
        assert all(applied) and rig.loader.count == n
        check_cache(rig.loader, rig.rig.arrays)
    finally:
        rig.close()


# -- sync ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SLOW_SIZES, ids=SLOW_IDS)
def test_sync_baseline(benchmark, per_sample_refs, n):
    label(
        benchmark, "sync", BASELINE, n, baseline="blocking: per-sample ray.get + per-sample apply"
    )
    refs = per_sample_refs(n)
    cache = empty_cache(n, "cpu")
    rows = torch.arange(n)
    benchmark.pedantic(
        lambda: blocking_fetch_and_apply(refs, cache, rows, "cpu"), rounds=1, warmup_rounds=0
    )
    np.testing.assert_array_equal(cache["x.value"].numpy(), make_samples(n)["x.value"])


@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_sync_kestrel(benchmark, ray_session, n):
    label(
        benchmark, "sync", KESTREL, n, path="CachedDataLoader.sync (fetch in flight)", store="ray"
    )
    rig = LoaderRig(n, "cpu", "ray")
    try:
        results = []
        benchmark.pedantic(
            lambda: results.append(rig.loader.sync()),
            setup=rig.fetch_in_flight,
            rounds=5,
            warmup_rounds=1,
        )
        # False: sync() found the fetch running and returned at once (see test_03_torch.py)
        benchmark.extra_info["in_flight_fraction"] = results.count(False) / len(results)
        rig.loader.sync(wait=True)
        rig.loader.sync(wait=True)
        check_cache(rig.loader, rig.rig.arrays)
    finally:
        rig.close()


# -- sample_batch ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_sample_batch_baseline(benchmark, n):
    label(
        benchmark,
        "sample_batch",
        BASELINE,
        n,
        batch=BATCH,
        baseline="host arrays[idx] -> torch.as_tensor -> .to(device)",
    )
    arrays = _data(n)
    rng = np.random.default_rng(0)

    def draw():
        idx = rng.integers(n, size=BATCH)
        return {k: torch.as_tensor(v[idx]).to("cpu") for k, v in arrays.items()}

    out = benchmark.pedantic(draw, rounds=200, warmup_rounds=5)
    assert out["x.value"].shape == (BATCH, 1000)


@pytest.mark.parametrize("n", SCALE_SIZES, ids=N_IDS)
def test_sample_batch_kestrel(benchmark, ray_session, n):
    label(
        benchmark,
        "sample_batch",
        KESTREL,
        n,
        batch=BATCH,
        path="CachedDataLoader.sample_batch",
        store="ray",
    )
    rig = LoaderRig(n, "cpu", "ray")
    generator = torch.Generator("cpu").manual_seed(0)
    try:
        batch = benchmark.pedantic(
            lambda: rig.loader.sample_batch(BATCH, generator), rounds=200, warmup_rounds=5
        )
        assert len(batch) == BATCH and batch["x.value"].shape == (BATCH, 1000)
    finally:
        rig.close()
