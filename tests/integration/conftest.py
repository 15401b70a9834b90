"""End-to-end tests: the examples through ``launch`` / ``kestrel launch``.

In-process launches share one session Ray (``init_ray(num_cpus=2)`` is idempotent, so this
fixture and the Ray tests' one start Ray once per session). Tests that need a fresh process
(Ctrl-C, a new process loading weights, a cluster) run ``kestrel`` in a subprocess, which
starts and stops its own Ray.
"""

from __future__ import annotations

import pytest
import ray

from kestrel_ray import init_ray

from .helpers import alive_actors, wait_dead


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray with 2 CPUs for the in-process launches."""
    started = not ray.is_initialized()
    init_ray(num_cpus=2)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def no_leaked_actors(ray_session):
    """Fails the test if it leaves an actor of the session's Ray alive."""
    before = alive_actors()
    yield
    left = wait_dead(alive_actors() - before)
    assert not left, f"actors left alive: {sorted(left)}"
