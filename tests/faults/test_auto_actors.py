"""``num_actors: auto`` on a ``ray start`` cluster that grows mid-run (issue 32, item 4).

A head offering ``kestrel_head`` (the estimator z, the store, the driver's node) and one worker
node offering one slot of ``kestrel_sim`` (:mod:`tests.faults.lost_node`): the simulator node
x, ``num_actors: auto`` with ``resources: {kestrel_sim: 1}``, starts with 1 replica. Once
rows are journaled a second worker joins with one more slot; the launch's watch
(:class:`kestrel_ray.internal.AutoActors`, every 10 s) starts a replica for it, and the rounds
after that split their rows over both: the new replica's samples are counted in the launch's
``profile.json`` (per replica). The launch is stopped with Ctrl-C once enough rows came after
the join (by count, never by seconds); its budget is one it cannot spend first.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from ..integration.helpers import KESTREL
from ..integration.real_cluster import unshare_works
from .lost_node import LostNodeCluster
from .test_lost_node import config, journal_rows

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        not unshare_works(),
        reason="needs `unshare --mount` and tmpfs mounts (root, or unprivileged user "
        "namespaces) for worker nodes that see other disks",
    ),
    pytest.mark.timeout(600),
]

#: rows journaled before the second worker joins, and after its replica started
BEFORE, AFTER = 128, 320


def wait_for(what: str, done, proc: subprocess.Popen, out: Path, limit: float = 300) -> None:
    """Poll ``done()`` until true; fail naming ``what`` if the launch ends or hangs first."""
    deadline = time.monotonic() + limit
    while not done():
        if proc.poll() is not None:
            pytest.fail(f"the launch ended before {what}: {out.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} within {limit:.0f} s: {out.read_text()[-4000:]}")
        time.sleep(0.2)


def test_a_node_that_joins_gets_replicas_that_simulate():
    base = Path(tempfile.mkdtemp(prefix="kestrel-auto-"))
    try:
        cfg = config(base)
        cfg["budget"]["simulations"] = 1_000_000  # stopped by Ctrl-C, after counted rows
        cfg["graph"]["x"]["num_actors"] = "auto"
        (base / "config.yml").write_text(yaml.safe_dump(cfg))
        run, out = base / "grows", base / "grows.txt"
        with LostNodeCluster([base], {"kestrel_sim": 1}, workers=1) as rc:
            with open(out, "wb") as sink:
                proc = subprocess.Popen(
                    [*KESTREL, "launch", "-c", base / "config.yml", "-o", run]
                    + ["--address", rc.address, "--progress", "log", "--seed", "8"],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    env=rc.driver_env(),
                    cwd=base,
                )
            try:
                log = run / "graph" / "driver" / "output.log"
                wait_for(f"{BEFORE} rows", lambda: journal_rows(run) >= BEFORE, proc, out)
                assert "num_actors: auto → 1 replicas" in log.read_text()
                rc.add_worker()  # one more slot of kestrel_sim
                wait_for(
                    "a replica for the new node",
                    lambda: "1 new replica(s) joined; 2 serving" in log.read_text(),
                    proc,
                    out,
                )
                rows = journal_rows(run)
                wait_for(f"{AFTER} rows more", lambda: journal_rows(run) >= rows + AFTER, proc, out)
                proc.send_signal(signal.SIGINT)
                proc.wait(120)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        status = json.loads((run / "status.json").read_text())
        assert status["status"] == "interrupted", out.read_text()[-4000:]
        replicas = json.loads((run / "profile.json").read_text())["actors"]["x"]
        samples = {r["replica"]: r["samples"] for r in replicas}
        print(f"samples per replica of x: {samples}")
        assert sorted(samples) == [0, 1], samples
        assert samples[1] > 0, f"the new node's replica simulated nothing: {samples}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
