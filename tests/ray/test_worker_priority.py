"""Issue 31 item 7: a local Ray's workers run at the driver's priority (Ray's default niceness
of 15 makes the estimators' training yield to every other program on a shared machine)."""

from __future__ import annotations

import os

import ray


@ray.remote(num_cpus=0)
class Niceness:
    def get(self) -> int:
        return os.nice(0)


def test_a_local_rays_workers_run_at_the_drivers_niceness(ray_session):
    assert os.environ.get("RAY_worker_niceness") == "0"  # set by init_ray (unless the user did)
    actor = Niceness.remote()
    try:
        assert ray.get(actor.get.remote(), timeout=120) == os.nice(0)
    finally:
        ray.kill(actor)
