"""Training: optimizer steps per second while the buffer grows, vs an in-memory tensor set.

Group ``training``: example 05's GaussianPosterior (SignalProjection embedding, batch 128);
group ``training_flow``: a FlowPosterior (zuko spline flow, APT loss with 10 atoms) on the same
embedding, data and batch. Each takes ``PLAN[group]`` steps per round through its own training step; the round time is what is reported, so the ratio
baseline / Kestrel is Kestrel's steps/s over the baseline's (see :mod:`kestrel_bench._training`):

* Kestrel — the estimator's CachedDataLoader over a store with example 05's buffer (2048
  training + 256 validation samples), synced every epoch, while pre-simulated blocks of 128
  samples are appended every 0.1 s from a thread. CPU: Ray store; CUDA: the cache on the GPU,
  fed from kestrel-core's InMemoryStore (appends from a thread, no Ray), with the GPU's busy
  fraction sampled through NVML.
* baseline — the same steps on the same 2048 samples held as tensors on the device.

The Kestrel benchmark also runs one baseline round (appends paused) before each of its own
rounds and records the pairs in ``extra_info["paired"]``: the gate takes the median of the
per-pair ratios, which a machine whose load drifts between the two benchmarks cannot skew.
The separate baseline benchmark reports the baseline on its own. N is the training buffer size.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import pytest

from kestrel_bench import (
    BASELINE,
    BUFFER_05,
    ESTIMATORS,
    KESTREL,
    RESIMULATION_05,
    TRAIN_KEYS,
    Appender,
    StoreRig,
    UtilizationSampler,
    label,
    make_estimator,
    make_samples,
    skip_without_cuda,
    sync_device,
    tensor_set,
    train_steps,
)
from kestrel_core import TRAINABLE

DEVICES = ["cpu", "cuda"]
#: per group: steps per round and rounds. Gaussian: four epochs of 16 steps (2048 samples /
#: batch 128) per round; the flow's step costs ~15× more, so one epoch per round, five rounds
PLAN = {"training": (64, 9), "training_flow": (16, 5)}
GROUPS = list(PLAN)
N_TRAIN = BUFFER_05["max_samples"]
N_BUFFER = BUFFER_05["max_samples"] + BUFFER_05["validation_samples"]
WARMUP_STEPS = 16  # the first step builds the model


def _baseline(device: str, group: str):
    """A fresh estimator and its in-memory tensor set of the buffer's 2048 training samples, warmed up."""
    est = make_estimator(device, group=group)
    samples = make_samples(N_BUFFER)
    source = tensor_set(est, {k: samples[k][:N_TRAIN] for k in TRAIN_KEYS}, device)
    train_steps(est, source, WARMUP_STEPS, sync=False)
    return est, source


def _info(benchmark, durations: list[float], steps: int) -> None:
    benchmark.extra_info.update(
        steps=steps,
        batch_size=128,
        max_step_ms=1e3 * max(durations),
        median_step_ms=1e3 * statistics.median(durations),
    )


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("device", DEVICES)
def test_training_baseline(benchmark, device, group):
    skip_without_cuda(device)
    steps, rounds = PLAN[group]
    label(benchmark, group, BASELINE, N_TRAIN, device=device, baseline="in-memory tensor set")
    est, source = _baseline(device, group)
    durations: list[float] = []

    def run():
        good = train_steps(est, source, steps, sync=False, durations=durations)
        sync_device(device)
        return good

    assert benchmark.pedantic(run, rounds=rounds, warmup_rounds=1) == steps
    _info(benchmark, durations, steps)


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("device", DEVICES)
def test_training_kestrel(benchmark, request, device, group):
    skip_without_cuda(device)
    steps, rounds = PLAN[group]
    name = ESTIMATORS[group]
    backend = "ray" if device == "cpu" else "memory"
    if backend == "ray":
        request.getfixturevalue("ray_session")
    label(
        benchmark,
        group,
        KESTREL,
        N_TRAIN,
        device=device,
        store=backend,
        path=f"{name}._train_step on CachedDataLoader, appends every 0.1 s",
        append_rows=RESIMULATION_05[0],
        append_interval_s=RESIMULATION_05[1],
    )
    rig = StoreRig(backend, BUFFER_05, n=N_BUFFER, sets=2, keys=TRAIN_KEYS)
    rig.append_set()
    est = make_estimator(device, group=group)
    loader = est._loader(
        rig.view, TRAINABLE, "train"
    )  # the estimator's own loader (θ → z, float64)
    durations: list[float] = []
    base_est, base_source = _baseline(device, group)
    base_times: list[float] = []
    kestrel_times: list[float] = []

    def baseline_round():  # untimed by pytest-benchmark: the interleaved baseline
        appender.pause()
        start = time.perf_counter()
        train_steps(base_est, base_source, steps, sync=False)
        sync_device(device)
        base_times.append(time.perf_counter() - start)
        appender.resume()

    def run():
        start = time.perf_counter()
        good = train_steps(est, loader, steps, sync=True, durations=durations)
        sync_device(device)
        kestrel_times.append(time.perf_counter() - start)
        return good

    try:
        loader.sync()
        train_steps(est, loader, WARMUP_STEPS, sync=True)
        first_ids = set(loader.ids.tolist())
        appender = Appender(rig.append_block, RESIMULATION_05[1]).start()
        try:
            with UtilizationSampler() if device == "cuda" else contextlib.nullcontext() as busy:
                good = benchmark.pedantic(run, setup=baseline_round, rounds=rounds, warmup_rounds=1)
        finally:
            appends = appender.stop()
        assert good == steps
        _info(benchmark, durations, steps)
        warm = len(kestrel_times) - min(
            rounds, len(kestrel_times)
        )  # pairs of the warm-up round dropped
        benchmark.extra_info["paired"] = [
            [b, k] for b, k in zip(base_times[warm:], kestrel_times[warm:])
        ]
        # the data path really moved: blocks were appended and the cache turned over
        loader.sync(wait=True)
        loader.sync(wait=True)
        turned = len(set(loader.ids.tolist()) - first_ids)
        benchmark.extra_info.update(appends=appends, cache_rows_replaced=turned)
        if device == "cuda":
            benchmark.extra_info.update(gpu_busy_fraction=busy.mean, gpu_busy_error=busy.error)
        assert appends > 0 and turned > 0
    finally:
        loader.close()
        rig.close()
