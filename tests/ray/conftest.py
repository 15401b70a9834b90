"""One Ray for every test in tests/ray, and no actor left behind.

The fixtures come from the ``kestrel_ray.testing`` plugin (installed with kestrel-ray):
``ray_session`` starts a local Ray with 2 CPUs once per session — every test here uses it.
Tests create actors only through ``track`` (``track(handle)``) or ``deployed`` (DeployedGraphs
are shut down at teardown), so every actor a test starts is killed when it ends.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _ray_for_every_test(ray_session):
    yield
