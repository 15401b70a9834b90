"""A simulator that hangs: the ``timeout`` node option (issue 11, item 1).

A chunk still running ``timeout`` seconds after it could start is retried once on a restarted
actor (same seed: the same draws), then fails naming the node and the chunk — never a stall.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from kestrel_core import ConfigError, Graph, SimulatorError, Spec, load_config, sample_forward
from kestrel_core.testing.models import HangsAt, batches
from kestrel_ray.graph._actors import check_deployable

from .faultkit import toy

pytestmark = pytest.mark.faults

TIMEOUT = 1.0


def hang_graph(folder, hang_at, timeout=TIMEOUT) -> Graph:
    graph = Graph().add_node("z", Spec("kestrel_core.Product", {"priors": [["uniform", 0, 1]] * 2}))
    graph.add_node(
        "x",
        Spec(HangsAt, {"folder": str(folder), "hang_at": list(hang_at)}),
        parents=["z"],
        sample_chunk_size=16,
        timeout=timeout,
    )
    return graph


def test_a_chunk_that_hangs_once_is_retried_with_the_same_draws(deployed, tmp_path):
    folder = tmp_path / "batches"
    dg = deployed(hang_graph(folder, hang_at=[2]), seed=1)
    start = time.monotonic()
    arrays = dg.to_arrays(dg.sample(48))  # chunks of 16: chunk 1 (batch 2) hangs
    assert time.monotonic() - start < 60
    assert batches(folder) == 4  # chunk 0, chunk 1 hung, chunk 1 again, chunk 2
    expected = sample_forward(hang_graph(tmp_path / "clean", []), 48, seed=1, chunk_size=16)
    for key in ("z.value", "x.value"):
        np.testing.assert_array_equal(arrays[key], expected[key])


def test_a_chunk_that_hangs_again_fails_naming_node_and_chunk(deployed, tmp_path):
    dg = deployed(hang_graph(tmp_path / "batches", hang_at=[2, 3]), seed=1)
    with pytest.raises(
        SimulatorError,
        match=r"node 'x': chunk 1 of sample\(48\) \(rows 16:32\) did not finish within its "
        r"timeout of 1 s, twice",
    ):
        dg.sample(48)


def test_the_timeout_option_is_checked(tmp_path, ray_session):
    cfg = toy(tmp_path)
    cfg["graph"]["x"]["timeout"] = 30
    assert load_config(cfg).graph["x"].timeout == 30.0
    for bad in (0, -1, "5", float("inf"), True):
        with pytest.raises(ConfigError, match=r"graph\.x\.timeout: expected a number of seconds"):
            hang_graph(tmp_path, [], timeout=bad)
    cfg["graph"]["z"]["timeout"] = 30
    with pytest.raises(ConfigError, match=r"graph\.z\.timeout: node 'z' has an estimator"):
        check_deployable(load_config(cfg).graph)
