"""Training from disk: a buffer several times Ray's object store, read by the loader.

``python -m kestrel_bench._disk --n 6144 --width 10000 --store-mib 96 --rounds 5 --out F``
starts a local Ray whose object store holds ``--store-mib`` MiB (Ray's own spilling goes to a
fresh folder under ``/tmp``), then builds two stores of samples θ ``(10,)``
and x ``(width,)`` float64 (80 KB a sample at the default width):

* **disk** (Kestrel's path, ``buffer.storage: disk``): a :class:`~kestrel_ray.SampleStore`
  with a :class:`~kestrel_core.store.DiskPolicy` (the object store keeps the default
  :data:`~kestrel_core.store.CACHE_SHARE` of itself) holding N samples — N × bytes a sample is
  at least 4× the object store — appended in blocks of :data:`~kestrel_bench.BLOCK_ROWS` rows,
  each append written to a journal folder under ``/tmp`` as the launch's driver does
  (:func:`kestrel_core.store.write_journal`, fsynced); the store hands every block beyond its
  cache to that journal;
* **memory** (the in-run baseline): a plain store holding M samples that fit in the object
  store (``--memory-rows``; default the rows the disk store keeps in memory, its cache).

Each round (alternating) a fresh :class:`~kestrel_torch.CachedDataLoader` (CPU) over each store
fills its cache — its first ``sync()``: the background fetch reads every row, from the object
store or the journal, and copies it into the cache — and the time is taken; the disk path runs
twice, *cold* (every journal file dropped from the page cache first with
``posix_fadvise(DONTNEED)``: read from the device) and *warm* (the files in the page cache).
Every cache is compared with the data. Rates are rows a second; ``ratio`` is the disk rate over
the in-memory rate (median rounds).

Output (JSON): ``n``, ``memory_rows``, ``width``, ``block_rows``, ``sample_bytes``,
``store_bytes``, ``buffer_bytes`` (N × sample bytes), ``journal_bytes`` (the files' size),
``cache_rows`` (what the object store kept), ``append_s`` / ``journal_s`` (building the disk
store: appends, journal writes), ``memory_s``, ``cold_s``, ``warm_s`` (seconds of each fill,
in round order), ``on_disk`` and ``disk_reads`` (the store's counts), ``correct``.
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

from ._rig import BLOCK_ROWS

__all__ = ["DISK_KEYS", "run", "main"]

DISK_KEYS = ("theta.value", "x.value")
MiB = 1 << 20


def _samples(n: int, width: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"theta.value": rng.standard_normal((n, 10)), "x.value": rng.standard_normal((n, width))}


def _drop_page_cache(folder: str) -> None:
    """Ask the kernel to forget the (clean, fsynced) pages of every file in ``folder``."""
    for name in os.listdir(folder):
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _fill(store: Any, arrays: dict[str, np.ndarray], name: str) -> tuple[float, bool]:
    """A fresh CPU loader over ``store`` fills its cache; returns (seconds, cache == data)."""
    from kestrel_ray import RayBufferView
    from kestrel_torch import CachedDataLoader

    loader = CachedDataLoader(RayBufferView(store), DISK_KEYS, device="cpu", name=name)
    try:
        start = time.perf_counter()
        loader.sync()  # the first sync: the background fetch of every row, applied
        seconds = time.perf_counter() - start
        batch = loader.all()
        ok = len(batch.ids) == len(arrays[DISK_KEYS[0]]) and all(
            np.array_equal(batch[k].numpy(), arrays[k][batch.ids]) for k in DISK_KEYS
        )
    finally:
        loader.close()
    return seconds, bool(ok)


def _append(store: Any, arrays: dict[str, np.ndarray], block_rows: int, journal: str | None):
    """Append ``arrays`` in blocks (journaled when ``journal``); returns (append s, journal s)."""
    import ray

    from kestrel_core import BlockMeta
    from kestrel_core.store import write_journal

    append_s = journal_s = 0.0
    n = len(arrays[DISK_KEYS[0]])
    for start in range(0, n, block_rows):
        block = {k: np.ascontiguousarray(a[start : start + block_rows]) for k, a in arrays.items()}
        t0 = time.perf_counter()
        refs = {k: ray.put(v) for k, v in block.items()}
        ids = store.append(refs, BlockMeta.of(block))
        del refs  # the store holds them now, and drops them once the block is on disk
        t1 = time.perf_counter()
        if journal is not None:
            write_journal(journal, ids, block)
        append_s += t1 - t0
        journal_s += time.perf_counter() - t1
    return append_s, journal_s


def run(
    n: int,
    width: int,
    store_mib: int,
    rounds: int,
    work: str,
    memory_rows: int | None = None,
    block_rows: int = BLOCK_ROWS,
) -> dict[str, Any]:
    """Start Ray (its spilling and the journal under ``work``), build, fill ``rounds`` times.

    Returns:
        The output described in the module's docstring.
    """
    import ray

    from kestrel_core.store import CACHE_SHARE, DiskPolicy
    from kestrel_ray import StoreHandle

    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=store_mib * MiB,
        object_spilling_directory=os.path.join(work, "spill"),
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    try:
        store_bytes = float(ray.cluster_resources().get("object_store_memory", 0))
        sample_bytes = 8 * (10 + width)
        m = memory_rows or max(block_rows, int(CACHE_SHARE * store_bytes // sample_bytes))
        journal = os.path.join(work, "journal")
        big = _samples(n, width, 0)
        small = {k: a[:m] for k, a in _samples(m, width, 1).items()}
        policy = DiskPolicy("disk", journal, store_bytes=store_bytes)
        disk = StoreHandle.start(min_samples=0, max_samples=n, validation_samples=0, disk=policy)
        memory = StoreHandle.start(min_samples=0, max_samples=m, validation_samples=0)
        try:
            append_s, journal_s = _append(disk, big, block_rows, journal)
            _append(memory, small, block_rows, None)
            held = disk.stats()
            memory_s, cold_s, warm_s, correct = [], [], [], True
            for r in range(rounds):
                seconds, ok = _fill(memory, small, f"memory-{r}")
                memory_s.append(seconds)
                correct &= ok
                _drop_page_cache(journal)
                seconds, ok = _fill(disk, big, f"cold-{r}")
                cold_s.append(seconds)
                correct &= ok
                seconds, ok = _fill(disk, big, f"warm-{r}")
                warm_s.append(seconds)
                correct &= ok
            counts = disk.stats()
        finally:
            for handle in (disk, memory):
                ray.kill(handle.actor)
        journal_bytes = sum(os.path.getsize(os.path.join(journal, f)) for f in os.listdir(journal))
        return {
            "n": n,
            "memory_rows": m,
            "width": width,
            "block_rows": block_rows,
            "sample_bytes": sample_bytes,
            "store_bytes": int(store_bytes),
            "buffer_bytes": n * sample_bytes,
            "journal_bytes": journal_bytes,
            "cache_rows": int(n - held.get("on_disk", 0)),
            "append_s": append_s,
            "journal_s": journal_s,
            "memory_s": memory_s,
            "cold_s": cold_s,
            "warm_s": warm_s,
            "on_disk": int(counts.get("on_disk", 0)),
            "disk_reads": int(counts.get("disk_reads", 0)),
            "correct": bool(correct),
        }
    finally:
        ray.shutdown()


def rates(result: dict[str, Any]) -> dict[str, float]:
    """Median rows a second of each fill, and the disk rates over the in-memory one."""
    memory = result["memory_rows"] / float(np.median(result["memory_s"]))
    cold = result["n"] / float(np.median(result["cold_s"]))
    warm = result["n"] / float(np.median(result["warm_s"]))
    return {
        "memory_rows_s": memory,
        "cold_rows_s": cold,
        "warm_rows_s": warm,
        "cold_ratio": cold / memory,
        "warm_ratio": warm / memory,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run :func:`run` in a fresh folder under /tmp (removed after); write the JSON (with
    :func:`rates`); 0 when every cache held its data, 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m kestrel_bench._disk", description=__doc__)
    parser.add_argument("--n", type=int, default=6144, help="samples N of the disk buffer")
    parser.add_argument("--width", type=int, default=10_000, help="floats of x per sample")
    parser.add_argument("--store-mib", type=int, default=96, help="object store size, MiB")
    parser.add_argument("--rounds", type=int, default=5, help="fills of each path")
    parser.add_argument("--memory-rows", type=int, default=None, help="rows of the baseline")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="kestrel-disk-", dir="/tmp")
    try:
        result = run(args.n, args.width, args.store_mib, args.rounds, work, args.memory_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update(rates(result))
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0 if result["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
