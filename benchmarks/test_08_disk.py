"""Training from disk (issue 32 item 2): the loader over a buffer ≥ 4× Ray's object store.

Marked ``disk``, only in ``hatch run bench:disk`` (20-70 s, not in ``bench:check``). One
``python -m kestrel_bench._disk`` run in a process of its own (its own Ray with a 96 MiB object
store: the session's Ray cannot be given a small one): N = 6144 samples of θ (10,) and x (10⁴,)
float64 (80 KB a sample, 492 MB: 4.9× the object store) in a store with ``buffer.storage:
disk`` (the object store keeps half of itself, the rest of the rows only in the journal),
against the in-run baseline, a store whose M rows fit in memory (as many as the disk store's
cache). Each round a fresh CPU :class:`~kestrel_torch.CachedDataLoader` fills its cache from
each store (its first ``sync()``: the background fetch of every row); the disk path runs with
the journal's pages dropped first (``disk_fill``, cold) and in the page cache
(``disk_fill_warm``). Every cache is compared with the data.

The groups compare rates: the baseline's seconds are the in-memory fill's, scaled to N rows
(``memory_s × N / M``), so the gate's ratio (baseline / Kestrel) is the disk rows/s over the
in-memory rows/s. Timed inside that process, reported with
:func:`~kestrel_bench.pedantic_inner`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kestrel_bench import BASELINE, KESTREL, label, pedantic_inner

pytestmark = pytest.mark.disk

#: samples, floats of x a sample, object store MiB, fills of each path
DISK_N, DISK_WIDTH, DISK_STORE_MIB, DISK_ROUNDS = 6144, 10_000, 96, 5


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """The JSON of one ``python -m kestrel_bench._disk`` run (its own Ray, shut down in it)."""
    out = tmp_path_factory.mktemp("disk") / "disk.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray of its own
    args = ["--n", DISK_N, "--width", DISK_WIDTH, "--store-mib", DISK_STORE_MIB]
    args += ["--rounds", DISK_ROUNDS, "--out", out]
    proc = subprocess.run(
        [sys.executable, "-m", "kestrel_bench._disk", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def _info(measured: dict) -> dict:
    keys = ("width", "sample_bytes", "store_bytes", "buffer_bytes", "journal_bytes")
    info = {k: measured[k] for k in keys}
    info.update({k: measured[k] for k in ("memory_rows", "cache_rows", "on_disk", "disk_reads")})
    info.update({k: round(measured[k], 3) for k in ("append_s", "journal_s")})
    info.update({k: round(measured[k]) for k in ("memory_rows_s", "cold_rows_s", "warm_rows_s")})
    return info


@pytest.mark.parametrize(
    ("group", "role", "series"),
    [
        ("disk_fill", BASELINE, "memory_s"),
        ("disk_fill", KESTREL, "cold_s"),
        ("disk_fill_warm", BASELINE, "memory_s"),
        ("disk_fill_warm", KESTREL, "warm_s"),
    ],
)
def test_disk_fill(benchmark, measured, group, role, series):
    scale = DISK_N / measured["memory_rows"] if role == BASELINE else 1.0
    info = _info(measured)
    if role == KESTREL:
        info.update(path="CachedDataLoader first sync, RayBufferView over buffer.storage: disk")
        info.update(pages="dropped (posix_fadvise)" if series == "cold_s" else "cached")
    else:
        info.update(
            baseline=f"the same loader over {measured['memory_rows']} rows in the object "
            "store, its seconds scaled to N rows"
        )
    label(benchmark, group, role, DISK_N, **info)
    seconds = iter(s * scale for s in measured[series])
    pedantic_inner(
        benchmark,
        lambda: (next(seconds), None),
        rounds=len(measured[series]),
        warmup_rounds=0,
        where=f"in a process of its own: its own Ray, a {DISK_STORE_MIB} MiB object store",
    )
    assert measured["correct"], "a loader's cache differed from the data"
    assert measured["buffer_bytes"] >= 4 * measured["store_bytes"]  # ≥ 4× the object store
    assert measured["on_disk"] > 0.8 * DISK_N  # most rows lived only in the journal
