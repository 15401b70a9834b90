"""Fetching beyond the object store's memory: a Ray of its own with a small object store.

``python -m kestrel_bench._spill --n 2048 --width 100000 --store-mib 512 --rounds 3 --out F``
starts a local Ray whose object store holds ``--store-mib`` MiB and spills to a fresh folder
under ``/tmp`` (removed at the end), and stores N samples of θ ``(10,)`` and x ``(width,)``
float64 (800 KB a sample at the default width) twice: in blocks of
:data:`~kestrel_bench.BLOCK_ROWS` rows in a :class:`~kestrel_ray.SampleStore` (Kestrel's path,
through :class:`~kestrel_bench.StoreRig`) and as one ref per sample and key (the naive
baseline). Together they are several times the object store, so Ray spills them to disk. Then,
round after round (Kestrel and baseline alternating), it reads all N back —
``RayBufferView.fetch`` against per-sample ``ray.get`` + ``np.stack``
(:func:`~kestrel_bench.fetch_per_sample`) — timing each read and comparing every value with the
arrays that were put.

It runs in a process of its own because a process joins one Ray, and the benchmark session's
Ray (``benchmarks/conftest.py``) has a large object store; ``benchmarks/test_06_scale.py``
starts it and reports its timings. Ray is shut down and the spill folder removed before the
process exits, also on failure.

Output (JSON): ``n``, ``width``, ``block_rows``, ``sample_bytes``, ``store_bytes`` (the object store's size),
``put_s`` (``{"kestrel": …, "baseline": …}``: making the refs, once), ``kestrel_s`` and
``baseline_s`` (seconds of each read, in round order), ``correct`` (every read equal to the
data), and the raylet's counters after the reads: ``spilled_bytes``, ``restored_bytes``,
``fallback_bytes`` (objects allocated outside the store when it was full), ``spill_dir_bytes``
(the spill folder's size after the reads).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._rig import BLOCK_ROWS, StoreRig

__all__ = ["SPILL_KEYS", "wide_samples", "run", "main"]

#: the keys of the wide samples (θ and a large x)
SPILL_KEYS = ("theta.value", "x.value")
MiB = 1 << 20


def wide_samples(n: int, width: int, seed: int = 0) -> dict[str, np.ndarray]:
    """N samples of θ ``(N, 10)`` and x ``(N, width)``, float64 standard normal (new arrays)."""
    rng = np.random.default_rng(seed)
    return {"theta.value": rng.standard_normal((n, 10)), "x.value": rng.standard_normal((n, width))}


def _store_counters() -> dict[str, int]:
    """The raylet's object-store counters (Ray's internal API, as ``ray memory --stats-only``)."""
    import ray
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address

    state = get_state_from_address(ray.get_runtime_context().gcs_address)
    stats = get_memory_info_reply(state).store_stats
    return {
        "spilled_bytes": int(stats.spilled_bytes_total),
        "restored_bytes": int(stats.restored_bytes_total),
        "fallback_bytes": int(stats.object_store_bytes_fallback),
    }


def _equal(out: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(out[k], arrays[k]) for k in SPILL_KEYS)


def _folder_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
    )


def run(
    n: int, width: int, store_mib: int, rounds: int, spill_dir: str, block_rows: int = BLOCK_ROWS
) -> dict[str, Any]:
    """Start Ray (spilling to ``spill_dir``), store, read ``rounds`` times; Ray shut down after.

    Returns:
        The output described in the module's docstring.
    """
    import ray

    from kestrel_core import TRAINABLE

    from ._naive import fetch_per_sample, put_per_sample

    # address="local": a new Ray even where `ray start` left a cluster that a plain ray.init()
    # would join (/tmp/ray/ray_current_cluster); Kestrel's init_ray has no such address
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=store_mib * MiB,
        object_spilling_directory=spill_dir,
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    try:
        arrays = wide_samples(n, width)
        start = time.perf_counter()
        buffer = {"min_samples": 0, "max_samples": n, "validation_samples": 0}
        rig = StoreRig("ray", buffer, n=n, keys=SPILL_KEYS, samples=arrays, block_rows=block_rows)
        rig.append_set()
        put_kestrel = time.perf_counter() - start
        start = time.perf_counter()
        refs = put_per_sample(arrays)
        put_baseline = time.perf_counter() - start
        kestrel_s, baseline_s, correct = [], [], True
        try:
            for _ in range(rounds):
                start = time.perf_counter()
                fetched = rig.view.fetch(TRAINABLE, SPILL_KEYS)
                kestrel_s.append(time.perf_counter() - start)
                correct &= len(fetched.new_ids) == n and _equal(fetched.arrays, arrays)
                del fetched
                start = time.perf_counter()
                stacked = fetch_per_sample(refs)
                baseline_s.append(time.perf_counter() - start)
                correct &= _equal(stacked, arrays)
                del stacked
            counters = _store_counters()
            counters["spill_dir_bytes"] = _folder_bytes(spill_dir)  # while the refs live
        finally:
            rig.close()
        return {
            "n": n,
            "width": width,
            "block_rows": block_rows,
            "sample_bytes": sum(a[0].nbytes for a in arrays.values()),
            "store_bytes": int(ray.cluster_resources().get("object_store_memory", 0)),
            "put_s": {"kestrel": put_kestrel, "baseline": put_baseline},
            "kestrel_s": kestrel_s,
            "baseline_s": baseline_s,
            "correct": bool(correct),
            **counters,
        }
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    """Run :func:`run` in a fresh spill folder under /tmp; write the JSON; 0 when every read was
    correct, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m kestrel_bench._spill", description=__doc__)
    parser.add_argument("--n", type=int, default=2048, help="samples N")
    parser.add_argument("--width", type=int, default=100_000, help="floats of x per sample")
    parser.add_argument("--store-mib", type=int, default=512, help="object store size, MiB")
    parser.add_argument("--rounds", type=int, default=3, help="reads of each path")
    parser.add_argument("--block-rows", type=int, default=BLOCK_ROWS, help="rows a stored block")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    spill_dir = tempfile.mkdtemp(prefix="kestrel-spill-", dir="/tmp")
    try:
        result = run(args.n, args.width, args.store_mib, args.rounds, spill_dir, args.block_rows)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0 if result["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
