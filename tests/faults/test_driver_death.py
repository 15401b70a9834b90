"""``kill -9`` of the driver while it trains (issue 11, item 1).

SIGKILL cannot be caught: nothing is saved at that moment. What the run keeps is its last
checkpoint (:mod:`kestrel.persist._checkpoint`: the whole buffer and the improved weights,
written atomically about once a minute — every 0.5 s here) and the journal of every append
since (``RUN/buffer/journal/``, :mod:`kestrel.persist._journal`), and ``kestrel launch -o RUN``
continues from them: the buffer put back with its ids and statuses, the journal's rows
appended after it with their ids, the weights loaded — every row on disk at the kill is in the
resumed store, and they are every row simulated but the rounds in flight.

SIGTERM, the polite kill, stops a launch like the first Ctrl-C:
tests/integration/test_signals.py.

The test runs ``kestrel launch`` in a process of its own (≈ 25 s with the resume), so CI skips
it; run it with ``KESTREL_FAULTS_FULL=1 hatch test tests/faults -- -m faults``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from kestrel import launch
from kestrel_core.store import journal_files, read_journal_file
from kestrel_core.testing.models import batches

from ..integration.helpers import REPO, kestrel_env
from .faultkit import (
    FOREVER,
    buffer_file,
    checkpointed,
    contiguous,
    driver_log,
    journaled_beyond,
    status,
    toy,
)

#: rows per simulator batch (the toy's ``sample_chunk_size`` and ``simulate_count``)
CHUNK = 16

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        os.environ.get("KESTREL_FAULTS_FULL", "") in ("", "0"),
        reason="a kestrel launch in a process of its own (≈ 25 s): KESTREL_FAULTS_FULL=1",
    ),
]

#: ``kestrel launch`` with a checkpoint every 0.5 s (the default is 60 s)
LAUNCH = (
    "import sys; import kestrel.persist._checkpoint as c; c.CHECKPOINT_EVERY = 0.5; "
    "from kestrel.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_kill_9_of_the_driver_leaves_a_run_that_continues(tmp_path, no_leaked_actors):
    import psutil

    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(toy(tmp_path, epochs=FOREVER, max_samples=100_000)))
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, "launch", "-c", str(config), "-o", str(run), "--seed", "4"],
        cwd=str(REPO),
        env=kestrel_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checkpoint = checkpointed(run, epochs=2)

    ready = journaled_beyond(run, checkpoint)  # a checkpoint, and appends only the journal holds

    try:
        deadline = time.monotonic() + 180
        while not ready():
            assert proc.poll() is None, f"kestrel launch ended early ({proc.returncode})"
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            time.sleep(0.1)
        ray_processes = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the local Ray the driver started mostly goes with it (its raylet and GCS watch the
    # driver); Ray's agents may linger: never leave them running
    _, alive = psutil.wait_procs(ray_processes, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()

    assert status(run)["status"] == "running"  # nobody could write the end
    saved = buffer_file(run)  # the last checkpoint's, whole (written atomically)
    assert contiguous(saved["_ids"]) and int(saved["_next_id"]) == len(saved["_ids"])
    # what is on disk: the snapshot, and the journal's appends beyond it
    on_disk = {int(i): {k: saved[k][r] for k in keys(saved)} for r, i in enumerate(saved["_ids"])}
    beyond = 0
    for file in journal_files(run / "buffer" / "journal"):
        if file.last >= int(saved["_next_id"]):
            block = read_journal_file(file)  # every file whole: written atomically
            beyond += block.n
            for r, i in enumerate(block.ids.tolist()):
                on_disk[i] = {k: block.arrays[k][r] for k in block.arrays}
    simulated = batches(tmp_path / "batches") * CHUNK  # batches begun, by the simulator
    print(f"kill -9: {simulated} rows simulated, {len(on_disk)} on disk ({beyond} in the journal)")
    assert beyond > 0 and sorted(on_disk) == list(range(len(on_disk)))
    # every row simulated is on disk but those of the rounds in flight (one simulating, one
    # whose append's answer had not come back: up to two rounds)
    assert len(on_disk) >= simulated - 2 * CHUNK

    result = launch(None, run, progress=False, epochs=1, auto_sample=False, trust=True)
    assert result.status == "completed" and result.resumed == ["z"]
    log = driver_log(run)
    assert "buffer restored from" in log and "initial simulation: 0 samples from the prior" in log
    assert f"journal: {beyond} rows" in log
    final = buffer_file(run)
    assert contiguous(final["_ids"])
    where = {int(i): r for r, i in enumerate(final["_ids"])}
    lost = [
        i
        for i, row in on_disk.items()
        if i not in where or any(not np.array_equal(final[k][where[i]], v) for k, v in row.items())
    ]
    assert lost == []  # 0 lost: same ids, same values


def keys(saved) -> list[str]:
    return [k for k in saved if not k.startswith("_")]
