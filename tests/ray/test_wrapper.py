"""The NodeWrapper boundary: conditions in, validated blocks out (K05, K07, K12, K19)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import ray

from kestrel_core import Graph, OutputTypeError, ShapeError, SimulatorError, Spec, sample_forward
from kestrel_core.testing.models import Probe, Quirky, Ragged

from .helpers import chain_graph, estimator_graph, get, put, read, start_node


@pytest.fixture(scope="module")
def probe_graph():
    return (
        Graph().add_node("x", Spec(Probe), parents=["c"]).add_node("c", Spec(Probe))
    )  # only x's actor is started


def test_broadcast_condition_stays_one_row_until_the_simulator(track, probe_graph):
    handle = start_node(track, probe_graph, "x")
    x_o = np.array([[7.0, 1.0]])
    out = read(handle.submit("sample", 64, {"c": put(x_o)}, [64]))["value"]
    # the simulator saw a read-only broadcast view of 64 rows made from the one stored row
    assert out.shape == (64, 4)
    assert (out[:, 0] == 1.0).all() and (out[:, 1] == 0.0).all() and (out[:, 2] == 64).all()
    assert (out[:, 3] == 7.0).all()
    per_sample = np.arange(128.0).reshape(64, 2)
    out = read(handle.submit("sample", 64, {"c": put(per_sample)}, [32, 32]))["value"]
    assert (out[:, 0] == 0.0).all() and (out[:, 1] == 0.0).all()  # not broadcast, still read-only
    assert (out[:, 2] == 32).all()  # chunked: the simulator saw 32 rows per call
    np.testing.assert_array_equal(out[:, 3], per_sample[:, 0])


def test_condition_spanning_blocks_and_partial_segments(track, probe_graph):
    handle = start_node(track, probe_graph, "x")
    a, b = np.arange(10.0).reshape(5, 2), np.arange(10.0, 20.0).reshape(5, 2)
    col = (put(a) + put(b)).slice(3, 8)  # rows 3-4 of a, rows 0-2 of b
    out = read(handle.submit("sample", 5, {"c": col}, [5]))["value"]
    np.testing.assert_array_equal(out[:, 3], np.concatenate([a[3:, 0], b[:3, 0]]))


def test_chunks_are_blocks_and_match_sample_forward(track):
    g = chain_graph(2)
    handle = start_node(track, g, "n0")
    seeds = np.random.SeedSequence(0).spawn(2)[0].spawn(3)  # node n0's first call, 3 chunks
    pending = handle.submit("sample", 8, {}, [3, 3, 2], seeds)
    assert [len(col.segments) for col in pending.columns.values()] == [3, 3]
    arrays = read(pending)
    ref = sample_forward(g, 8, seed=0, chunk_size=3)
    np.testing.assert_array_equal(arrays["value"], ref["n0.value"])
    np.testing.assert_array_equal(arrays["log_prob"], ref["n0.log_prob"])


def test_k12_outputs_converted_once_or_rejected_naming_node_and_type(track):
    g = Graph().add_node("q", Spec(Quirky))
    handle = start_node(track, g, "q")
    lists = read(handle.submit("sample", 1, {}, [1]))["value"]
    assert lists.dtype == np.float64 and lists.tolist() == [0.5]
    tensorish = read(handle.submit("sample", 2, {}, [2]))["value"]
    assert isinstance(tensorish, np.ndarray) and tensorish.shape == (2, 3)
    with pytest.raises(OutputTypeError, match=r"node 'q'.*simulate_batch\(3.*NoneType") as err:
        read(handle.submit("sample", 3, {}, [3]))
    assert isinstance(err.value, TypeError)
    with pytest.raises(OutputTypeError, match=r"node 'q'.*without 'value'"):
        read(handle.submit("sample", 4, {}, [4]))
    with pytest.raises(
        ShapeError,
        match=r"node 'q': simulate_batch\(5, …\) returned shape \(2,\), "
        r"expected leading dimension 5",
    ):  # K11
        read(handle.submit("sample", 5, {}, [5]))


def test_k05_ragged_per_sample_output_named_where_the_block_forms(track):
    g = Graph().add_node("theta", Spec(Quirky)).add_node("x", Spec(Ragged), parents=["theta"])
    handle = start_node(track, g, "x")
    theta = np.repeat(np.arange(8.0)[:, None], 2, axis=1)
    with pytest.raises(
        ShapeError,
        match=r"node 'x', key 'x\.value': sample 5 has shape \(9,\), "
        r"expected \(10,\)",
    ):
        read(handle.submit("sample", 8, {"theta": put(theta)}, [8]))


def test_k07_broadcast_evidence_with_per_sample_scaffold(track):
    handle = start_node(track, estimator_graph(steps=0), "theta")
    x_o = np.arange(1.0, 6.0)[None]  # (1, 5): one observation for every sample
    scaffold = np.arange(192.0).reshape(64, 3)
    many = read(handle.submit("sample_proposal", 64, {"x": put(x_o), "s": put(scaffold)}, [64]))
    one = read(handle.submit("sample_proposal", 1, {"x": put(x_o), "s": put(scaffold[:1])}, [1]))
    np.testing.assert_array_equal(one["value"], many["value"][:1])  # n=1 gives what n=64 gives
    np.testing.assert_array_equal(many["value"][:, 0], 1.0 + scaffold.sum(axis=1))
    assert many["log_prob"].shape == (64,)
    seen = ray.get(handle.actor.status.remote())["estimator"]["seen_shapes"]
    assert seen[0] == {"x": (1, 5), "s": (64, 3)}  # x_o stayed one row up to the estimator
    with pytest.raises(
        ShapeError,
        match=r"condition 'x' has leading dimension 5; "
        r"expected 1 \(broadcast\) or 100",
    ):
        read(handle.submit("sample_posterior", 100, {"x": put(np.zeros((5, 3)))}, [100]))


def test_missing_parent_is_named(track):
    handle = start_node(track, chain_graph(2), "n1")
    with pytest.raises(SimulatorError, match=r"node 'n1'.*parent 'n0'"):
        read(handle.submit("sample", 4, {}, [4]))


def test_k19_proposals_interleave_with_training(deployed):
    dg = deployed(estimator_graph(steps=200, step_s=0.05), seed=0)
    dg.append(dg.sample(32))
    train_ref = dg.start_training()["theta"]

    def steps():
        return dg.status(timeout=30)["theta"]["estimator"]["steps"]

    deadline = time.monotonic() + 60
    while steps() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    first = steps()
    latencies = []
    for _ in range(5):
        t0 = time.perf_counter()
        arrays = dg.to_arrays(dg.sample_proposal(64))
        latencies.append(time.perf_counter() - t0)
        assert arrays["theta.value"].shape == (64, 2)
    during = steps()
    dg.request_stop()
    final = get(train_ref)
    assert max(latencies) < 2.0, latencies
    assert first > 0 and during > first  # training kept stepping between the proposals
    assert final["state"] == "done" and final["estimator"]["steps"] < 200  # stopped early
    assert final["estimator"]["samples_seen"] == 32  # fetched through RayBufferView in a thread
