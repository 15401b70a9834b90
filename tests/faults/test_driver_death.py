"""``kill -9`` of the driver while it trains (issue 11, item 1).

SIGKILL cannot be caught: nothing is saved at that moment. What the run keeps is its last
checkpoint (:mod:`kestrel_ray.run._checkpoint`: the whole buffer and the improved weights,
written atomically about once a minute — every 0.5 s here), and ``kestrel launch -o RUN``
continues from it: the buffer put back with its ids and statuses, the weights loaded.

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

import pytest
import yaml

from kestrel_ray import launch

from ..integration.helpers import REPO, kestrel_env
from .faultkit import FOREVER, buffer_file, checkpointed, contiguous, driver_log, status, toy

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        os.environ.get("KESTREL_FAULTS_FULL", "") in ("", "0"),
        reason="a kestrel launch in a process of its own (≈ 25 s): KESTREL_FAULTS_FULL=1",
    ),
]

#: ``kestrel launch`` with a checkpoint every 0.5 s (the default is 60 s)
LAUNCH = (
    "import sys; import kestrel_ray.run._checkpoint as c; c.CHECKPOINT_EVERY = 0.5; "
    "from kestrel_core._cli import main; sys.exit(main(sys.argv[1:]))"
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
    ready = checkpointed(run, epochs=2)
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
    result = launch(None, run, progress=False, epochs=1, auto_sample=False)
    assert result.status == "completed" and result.resumed == ["z"]
    log = driver_log(run)
    assert "buffer restored from" in log and "no simulation from the prior" in log
    assert len(buffer_file(run)["_ids"]) >= len(saved["_ids"])
