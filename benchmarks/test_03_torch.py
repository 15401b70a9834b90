"""Torch layer: the cached loader's training-thread costs. N samples of θ (10,), μ (1000,), x (1000,).

``apply_fetch`` — add N fetched samples to a cache of N rows whose N samples were just evicted;
timed on the training thread:
* baseline — per sample and key ``np.array → torch.as_tensor → .to(device)``, stacked and
  scattered into the freed rows (the original ``_apply_fetch`` before its fix);
* Kestrel — ``CachedDataLoader.sync()`` with the background fetch of the N new samples done:
  one indexed scatter per key of tensors the background thread already built on the device.
  CPU: store in Ray; CUDA: kestrel-core's InMemoryStore (no Ray needed there).

``sync`` — how long ``sync()`` blocks the training thread while a fetch of N new samples is in
flight (CPU, Ray store); the baseline is the original blocking sync: per-sample ``ray.get`` and
the per-sample apply, all on the training thread. Gated on Kestrel's absolute time.

``fill`` (reported, not gated) — the background thread's host → device step for N fetched
samples (16.5 MB at N = 1024):
* baselines — per-sample ``torch.as_tensor(row).to(device)`` then ``torch.stack``; and the
  original's fix, ``np.stack`` then one ``.to(device)``;
* Kestrel — ``HostToDevice.copy`` per key (pinned staging ring and a side stream on CUDA; one
  owned copy on the CPU), the loader's internal transfer helper, waited for.

``sample_batch`` (reported, not gated) — draw a batch of 128 for a training step:
* baseline — index host arrays, ``torch.as_tensor(...).to(device)`` per key (no device cache);
* Kestrel — ``CachedDataLoader.sample_batch(128)`` from the device cache.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kestrel_bench import (
    BASELINE,
    BIG,
    DATA_KEYS,
    KESTREL,
    SIZES,
    LoaderRig,
    apply_per_sample,
    blocking_fetch_and_apply,
    check_cache,
    empty_cache,
    label,
    make_samples,
    rounds,
    skip_without_cuda,
    sync_device,
)

N_IDS = [f"N={n}" for n in SIZES]
DEVICES = ["cpu", "cuda"]
BATCH = 128


def _backend(device: str, request) -> str:
    """Ray on the CPU (the production path), InMemoryStore on CUDA (no Ray on the GPU box)."""
    if device == "cpu":
        request.getfixturevalue("ray_session")
        return "ray"
    return "memory"


# -- apply_fetch -----------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_apply_fetch_baseline(benchmark, n, device):
    skip_without_cuda(device)
    label(
        benchmark,
        "apply_fetch",
        BASELINE,
        n,
        device=device,
        baseline="per-sample np.array -> torch.as_tensor -> .to(device) + scatter",
    )
    arrays = {k: v for k, v in make_samples(n).items() if k in DATA_KEYS}
    samples = {
        k: list(v) for k, v in arrays.items()
    }  # N row arrays per key, as ray.get returns them
    cache = empty_cache(n, device)
    rows = torch.arange(n, device=device)

    def apply():
        apply_per_sample(cache, rows, samples, device)
        sync_device(device)

    benchmark.pedantic(apply, rounds=rounds(n, 10, 3), warmup_rounds=1)
    np.testing.assert_array_equal(cache["x.value"].cpu().numpy(), arrays["x.value"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_apply_fetch_kestrel(benchmark, request, n, device):
    skip_without_cuda(device)
    backend = _backend(device, request)
    label(
        benchmark,
        "apply_fetch",
        KESTREL,
        n,
        device=device,
        path="CachedDataLoader.sync (fetch done)",
        store=backend,
    )
    rig = LoaderRig(n, device, backend)
    applied = []

    def apply():
        applied.append(rig.loader.sync())
        sync_device(device)

    try:
        benchmark.pedantic(apply, setup=rig.fetch_ready, rounds=rounds(n, 15, 5), warmup_rounds=1)
        assert all(applied) and rig.loader.count == n
        check_cache(rig.loader, rig.rig.arrays)
    finally:
        rig.close()


# -- sync ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_sync_baseline(benchmark, per_sample_refs, n):
    label(
        benchmark, "sync", BASELINE, n, baseline="blocking: per-sample ray.get + per-sample apply"
    )
    refs = per_sample_refs(n)
    cache = empty_cache(n, "cpu")
    rows = torch.arange(n)
    benchmark.pedantic(
        lambda: blocking_fetch_and_apply(refs, cache, rows, "cpu"),
        rounds=rounds(n, 5, 1),
        warmup_rounds=0 if n > BIG else 1,
    )
    np.testing.assert_array_equal(cache["x.value"].numpy(), make_samples(n)["x.value"])


@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_sync_kestrel(benchmark, request, n):
    label(
        benchmark, "sync", KESTREL, n, path="CachedDataLoader.sync (fetch in flight)", store="ray"
    )
    rig = LoaderRig(n, "cpu", _backend("cpu", request))
    results = []
    try:
        benchmark.pedantic(
            lambda: results.append(rig.loader.sync()),
            setup=rig.fetch_in_flight,
            rounds=rounds(n, 15, 5),
            warmup_rounds=1,
        )
        # False: the fetch was still running and sync() returned at once; True: it had finished
        # and this call applied it (the apply_fetch cost), which the median then reflects.
        benchmark.extra_info["in_flight_fraction"] = results.count(False) / len(results)
        rig.loader.sync(wait=True)
        rig.loader.sync(wait=True)
        check_cache(rig.loader, rig.rig.arrays)
    finally:
        rig.close()


# -- fill ------------------------------------------------------------------------------------
FILL_BASELINES = {
    "per-sample .to(device) + torch.stack": "rows",
    "np.stack + one .to(device)": "stack",
}


@pytest.mark.parametrize("how", list(FILL_BASELINES), ids=list(FILL_BASELINES.values()))
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_fill_baseline(benchmark, n, device, how):
    skip_without_cuda(device)
    label(benchmark, "fill", BASELINE, n, device=device, baseline=how)
    arrays = {k: v for k, v in make_samples(n).items() if k in DATA_KEYS}
    rows = {k: list(v) for k, v in arrays.items()}  # as per-sample ray.get returns them

    def fill():
        if FILL_BASELINES[how] == "rows":
            out = {
                k: torch.stack([torch.as_tensor(r).to(device) for r in v]) for k, v in rows.items()
            }
        else:
            out = {k: torch.as_tensor(np.stack(v)).to(device) for k, v in rows.items()}
        sync_device(device)
        return out

    out = benchmark.pedantic(fill, rounds=rounds(n, 10, 3), warmup_rounds=1)
    np.testing.assert_array_equal(out["x.value"].cpu().numpy(), arrays["x.value"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_fill_kestrel(benchmark, n, device):
    skip_without_cuda(device)
    from kestrel_torch.data._staging import HostToDevice

    label(
        benchmark,
        "fill",
        KESTREL,
        n,
        device=device,
        path="HostToDevice.copy + wait (loader background)",
    )
    arrays = {k: v for k, v in make_samples(n).items() if k in DATA_KEYS}
    transfer = HostToDevice(device)

    def fill():
        out = {k: transfer.copy(v, torch.float64) for k, v in arrays.items()}
        transfer.wait()
        return out

    out = benchmark.pedantic(fill, rounds=rounds(n, 20, 5), warmup_rounds=1)
    np.testing.assert_array_equal(out["x.value"].cpu().numpy(), arrays["x.value"])


# -- sample_batch ----------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_sample_batch_baseline(benchmark, n, device):
    skip_without_cuda(device)
    label(
        benchmark,
        "sample_batch",
        BASELINE,
        n,
        device=device,
        batch=BATCH,
        baseline="host arrays[idx] -> torch.as_tensor -> .to(device)",
    )
    arrays = {k: v for k, v in make_samples(n).items() if k in DATA_KEYS}
    rng = np.random.default_rng(0)

    def draw():
        idx = rng.integers(n, size=BATCH)
        out = {k: torch.as_tensor(v[idx]).to(device) for k, v in arrays.items()}
        sync_device(device)
        return out

    out = benchmark.pedantic(draw, rounds=200, warmup_rounds=5)
    assert out["x.value"].shape == (BATCH, 1000)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", SIZES, ids=N_IDS)
def test_sample_batch_kestrel(benchmark, request, n, device):
    skip_without_cuda(device)
    backend = _backend(device, request)
    label(
        benchmark,
        "sample_batch",
        KESTREL,
        n,
        device=device,
        batch=BATCH,
        path="CachedDataLoader.sample_batch",
        store=backend,
    )
    rig = LoaderRig(n, device, backend)
    generator = torch.Generator(device).manual_seed(0)

    def draw():
        batch = rig.loader.sample_batch(BATCH, generator)
        sync_device(device)
        return batch

    try:
        batch = benchmark.pedantic(draw, rounds=200, warmup_rounds=5)
        assert len(batch) == BATCH and batch["x.value"].device.type == device
    finally:
        rig.close()
