"""NodeWrapper remembers one-row condition blocks (observations) by ref, boundedly."""

from __future__ import annotations

import numpy as np
import ray

from kestrel_core import Graph, Spec
from kestrel_core.testing.models import Probe
from kestrel_ray.node._wrapper import BROADCAST_MEMO

from .helpers import put, read, start_node


def test_remembered_observations_stay_correct_and_bounded(track):
    graph = Graph().add_node("x", Spec(Probe), parents=["c"]).add_node("c", Spec(Probe))
    handle = start_node(track, graph, "x")
    observed = put(np.array([[7.0, 1.0]]))  # one ref, passed to every call as a run does
    for _ in range(2):
        out = read(handle.submit("sample", 16, {"c": observed}, [16]))["value"]
        # still a read-only broadcast of the one stored row
        assert (out[:, 3] == 7.0).all() and (out[:, 0] == 1.0).all() and (out[:, 1] == 0.0).all()
    for v in range(BROADCAST_MEMO + 4):  # more distinct observations than are remembered
        out = read(handle.submit("sample", 4, {"c": put(np.array([[float(v), 0.0]]))}, [4]))[
            "value"
        ]
        assert (out[:, 3] == v).all()
    out = read(handle.submit("sample", 16, {"c": observed}, [16]))["value"]  # dropped, read again
    assert (out[:, 3] == 7.0).all()
    per_sample = np.arange(8.0).reshape(4, 2)  # blocks of several rows are never remembered
    out = read(handle.submit("sample", 4, {"c": put(per_sample)}, [4]))["value"]
    np.testing.assert_array_equal(out[:, 3], per_sample[:, 0])
    held = ray.get(handle.actor.__ray_call__.remote(lambda self: len(self._broadcast)))
    assert held == BROADCAST_MEMO
