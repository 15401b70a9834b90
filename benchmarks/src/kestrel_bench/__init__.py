"""Kestrel benchmarks: in-run baselines (the naive "before" paths) against Kestrel's paths.

Every benchmark group of ``benchmarks/`` holds a baseline from :mod:`kestrel_bench._naive`
and Kestrel's real code path, measured in the same run; :mod:`kestrel_bench.gate` turns the
pytest-benchmark JSON into one table of ratios and fails when a ratio falls below its floor.
This package imports kestrel-core, kestrel-ray and kestrel-torch (it measures all layers).
"""

__all__ = [
    "__version__",
    # data
    "SIZES",
    "SCALE_SIZES",
    "GATE_N",
    "DATA_KEYS",
    "TRAIN_KEYS",
    "make_samples",
    "prior",
    "Replay",
    "replay_graph",
    # the naive reference paths
    "naive_resolve",
    "put_per_sample",
    "put_thread_pool",
    "fetch_per_sample",
    "apply_per_sample",
    "blocking_fetch_and_apply",
    "TensorSet",
    # actors, rigs, training
    "NaiveNode",
    "ResolveProbe",
    "probe_node_blob",
    "StoreRig",
    "LoaderRig",
    "ReplayRounds",
    "BLOCK_ROWS",
    "empty_cache",
    "check_cache",
    "ESTIMATORS",
    "EXAMPLE_05",
    "BUFFER_05",
    "RESIMULATION_05",
    "make_estimator",
    "train_steps",
    "tensor_set",
    "Appender",
    "UtilizationSampler",
    "BusySimulator",
    "SleepSimulator",
    # timing and labels
    "InnerClock",
    "pedantic_inner",
    "label",
    "rounds",
    "BIG",
    "skip_without_cuda",
    "sync_device",
    "KESTREL",
    "BASELINE",
]

from .__about__ import __version__
from ._busy import BusySimulator, SleepSimulator
from ._clock import InnerClock, pedantic_inner
from ._data import (
    DATA_KEYS,
    GATE_N,
    SCALE_SIZES,
    SIZES,
    TRAIN_KEYS,
    Replay,
    make_samples,
    prior,
    replay_graph,
)
from ._gpu import UtilizationSampler
from ._label import BASELINE, BIG, KESTREL, label, rounds, skip_without_cuda, sync_device
from ._naive import (
    TensorSet,
    apply_per_sample,
    blocking_fetch_and_apply,
    fetch_per_sample,
    naive_resolve,
    put_per_sample,
    put_thread_pool,
)
from ._rig import BLOCK_ROWS, LoaderRig, ReplayRounds, StoreRig, check_cache, empty_cache
from ._training import (
    BUFFER_05,
    ESTIMATORS,
    EXAMPLE_05,
    RESIMULATION_05,
    Appender,
    make_estimator,
    tensor_set,
    train_steps,
)


def __getattr__(name: str):
    # the actor classes import kestrel_ray (and so ray); load them only when asked for
    if name in ("NaiveNode", "ResolveProbe", "probe_node_blob"):
        from . import _actors

        return getattr(_actors, name)
    raise AttributeError(f"module 'kestrel_bench' has no attribute {name!r}")
