"""Issue 31 item 7: a local Ray's workers run at the driver's priority (Ray's default niceness
of 15 makes the estimators' training yield to every other program on a shared machine).

The check runs in a process of its own, which starts its own local Ray with ``init_ray``: what
is tested is what ``init_ray`` does for a new local Ray, whatever Ray this test session holds.
"""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import os, ray
from kestrel_ray import init_ray
init_ray(num_cpus=1)
assert os.environ.get("RAY_worker_niceness") == "0", os.environ.get("RAY_worker_niceness")

@ray.remote(num_cpus=0)
class Niceness:
    def get(self):
        return os.nice(0)

actor = Niceness.remote()
print("driver", os.nice(0), "worker", ray.get(actor.get.remote(), timeout=120))
ray.shutdown()
"""


def test_a_local_rays_workers_run_at_the_drivers_niceness(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_worker_niceness")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    driver, worker = words[words.index("driver") + 1], words[words.index("worker") + 1]
    assert worker == driver, done.stdout
