"""One Ray for every test in tests/ray, and no actor left behind.

``ray_session`` starts a local Ray with 2 CPUs once per session (``init_ray`` is idempotent, so
other test folders may share it). Tests create actors only through the ``track`` fixture
(``track(handle)``) or through ``deployed`` (DeployedGraphs are shut down at teardown), so every
actor a test starts is killed when it ends.
"""

from __future__ import annotations

import pytest
import ray

from kestrel_ray import DeployedGraph, init_ray


@pytest.fixture(scope="session", autouse=True)
def ray_session():
    started = not ray.is_initialized()
    init_ray(num_cpus=2)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def track():
    """``track(handle)`` registers an actor to be killed after the test; returns the handle."""
    handles = []

    def add(handle):
        handles.append(handle)
        return handle

    yield add
    for handle in handles:
        ray.kill(handle)


@pytest.fixture
def deployed():
    """``deployed(graph, **kw)`` → a deployed DeployedGraph, shut down after the test."""
    graphs = []

    def make(graph, **kw):
        dg = DeployedGraph(graph, **kw)
        graphs.append(dg)
        return dg.deploy()

    yield make
    for dg in graphs:
        dg.shutdown()
