"""Pytest fixtures for tests that run on Ray: a pytest plugin shipped with kestrel-ray.

kestrel-ray registers this module under the ``pytest11`` entry point, so every pytest run in an
environment where kestrel-ray is installed can ask for these fixtures; none is autouse, so the
plugin changes nothing for a test that does not name one. Ray is imported only when a fixture
runs.

* ``ray_session`` (session scope): one local Ray with :data:`RAY_TEST_CPUS` CPUs. A Ray
  already running in the process is reused and left running; one started here is shut down at
  the end of the session.
* ``track``: ``track(actor)`` registers an actor to be killed when the test ends; returns it.
* ``deployed``: ``deployed(graph, **kw)`` returns a deployed
  :class:`~kestrel_ray.DeployedGraph`, shut down when the test ends.
* ``no_leaked_actors``: fails the test if it leaves an actor of the session's Ray alive.

A suite that wants Ray for every test adds an autouse fixture of its own::

    @pytest.fixture(scope="session", autouse=True)
    def _ray(ray_session):
        yield
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:  # Ray is imported only when a fixture runs
    from kestrel_core import Graph
    from kestrel_ray import DeployedGraph

__all__ = ["RAY_TEST_CPUS", "alive_actors", "wait_dead"]

_Actor = TypeVar("_Actor")

#: CPUs of the session's local Ray (the project's machines have two cores)
RAY_TEST_CPUS = 2


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A local Ray for the whole session (reused if one is already running)."""
    import ray

    from kestrel_ray import init_ray

    started = not ray.is_initialized()
    init_ray(num_cpus=RAY_TEST_CPUS)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def track(ray_session: None) -> Iterator[Callable[[_Actor], _Actor]]:
    """``track(actor)`` registers an actor to be killed after the test; returns the actor."""
    import ray

    actors: list[Any] = []

    def add(actor: _Actor) -> _Actor:
        actors.append(actor)
        return actor

    yield add
    for actor in actors:
        ray.kill(actor)


@pytest.fixture
def deployed(ray_session: None) -> Iterator[Callable[..., DeployedGraph]]:
    """``deployed(graph, **kw)`` → a deployed DeployedGraph, shut down after the test."""
    from kestrel_ray import DeployedGraph

    graphs: list[DeployedGraph] = []

    def make(graph: Graph, **kw: Any) -> DeployedGraph:
        dg = DeployedGraph(graph, **kw)
        graphs.append(dg)
        return dg.deploy()

    yield make
    for dg in graphs:
        dg.shutdown()


@pytest.fixture
def no_leaked_actors(ray_session: None) -> Iterator[None]:
    """Fails the test if it leaves an actor of the session's Ray alive (after 10 s of grace)."""
    before = alive_actors()
    yield
    left = wait_dead(alive_actors() - before)
    assert not left, f"actors left alive: {sorted(left)}"


def alive_actors() -> set[str]:
    """Ids of the ALIVE actors of the Ray this process is connected to."""
    import ray

    return {k for k, v in ray._private.state.actors().items() if v["State"] == "ALIVE"}


def wait_dead(ids: set[str], timeout: float = 10.0) -> set[str]:
    """Wait until none of ``ids`` is alive; return those still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = ids & alive_actors()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = ids & alive_actors()
    return left
