"""DeployedGraph: ref-only execution, ownership, multiplexing (K02), two graphs (K15), K06."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import ray

from kestrel_core import (
    TRAINABLE,
    ConfigError,
    CountError,
    EstimatorError,
    GraphError,
    OutputTypeError,
    ShapeError,
    Spec,
    StoreError,
    load_config,
    sample_forward,
)
from kestrel_core.testing.models import CrashOnce
from kestrel_ray import DeployedGraph, RayBufferView, init_ray

from .helpers import chain_graph, estimator_graph, variant

EXAMPLE_05 = (
    Path(__file__).resolve().parents[2] / "examples" / "05_linear_regression" / "config.yml"
)


def held_refs(dg):
    return dg.store.held_refs()


def calls(dg, name):
    handle = dg.handle(name)
    return [s["calls"] for s in ray.get([a.status.remote() for a in handle.actors])]


def test_forward_sampling_05_equals_kestrel_simulate_and_stores_blocks(deployed):
    graph = load_config(EXAMPLE_05).graph
    dg = deployed(graph, seed=0, estimators=False)  # forward sampling needs no estimator
    trace = dg.sample(1024)
    arrays = dg.to_arrays(trace)
    expected = sample_forward(graph, 1024, seed=0)
    assert sorted(arrays) == sorted(expected)
    for key, value in expected.items():
        assert arrays[key].shape == value.shape and arrays[key].dtype == value.dtype
        if key == "theta.value":  # the seeded draw: the same seed scheme, bit for bit
            np.testing.assert_array_equal(arrays[key], value)
        else:  # derived through BLAS (mu = theta @ Phi^T) in an actor with its own thread count
            np.testing.assert_allclose(arrays[key], value, rtol=1e-12, atol=1e-12, err_msg=key)
    dg.append(trace)
    assert dg.store.stats()["total"] == 1024
    assert held_refs(dg) == 1 * len(expected)  # chunks × keys, not samples × keys
    with pytest.raises(EstimatorError, match="node 'theta' has evidence but no estimator"):
        dg.sample_posterior(4)  # never prior draws passed off as a posterior


def test_chunked_graph_stores_chunks_times_keys_objects(deployed):
    dg = deployed(chain_graph(3, chunk=100), seed=1)
    trace = dg.sample(1024)
    assert trace.keys() == ["n0.value", "n0.log_prob", "n1.value", "n2.value"]
    assert {len(trace[k].segments) for k in trace.keys()} == {11}  # one grid for all keys
    dg.append(trace)
    assert held_refs(dg) == 11 * 4
    fetch = RayBufferView(dg.store).fetch(TRAINABLE, trace.keys())
    arrays = dg.to_arrays(trace)
    for key in trace.keys():
        np.testing.assert_array_equal(fetch.arrays[key], arrays[key])
    assert arrays["n2.value"].shape == (1024, 2)


def test_killing_node_actors_after_append_loses_no_sample(deployed):
    dg = deployed(chain_graph(3, chunk=5), seed=2)
    trace = dg.sample(16)
    dg.append(trace)
    view = RayBufferView(dg.store, timeout=30)
    before = view.fetch(TRAINABLE, trace.keys())
    for name in dg.graph.nodes:
        for actor in dg.handle(name).actors:
            ray.kill(actor)
    after = view.fetch(TRAINABLE, trace.keys())
    assert after.new_ids.tolist() == list(range(16))
    for key in trace.keys():
        np.testing.assert_array_equal(after.arrays[key], before.arrays[key])
    np.testing.assert_array_equal(dg.to_arrays(trace)["n2.value"], before.arrays["n2.value"])


def test_k02_multiplexed_counts(deployed):
    dg = deployed(chain_graph(2, num_actors=4), seed=3)
    trace = dg.sample(3)
    assert trace.n == 3 and dg.to_arrays(trace)["n1.value"].shape == (3, 2)
    assert calls(dg, "n1") == [0, 1, 1, 1]  # the idle replica is not called
    empty = dg.sample(0)
    assert empty.n == 0 and empty.keys() == [] and dg.to_arrays(empty) == {}
    assert calls(dg, "n1") == [0, 1, 1, 1] and calls(dg, "n0") == [1]  # no simulator ran
    assert dg.to_arrays(dg.sample(np.int64(5)))["n1.value"].shape == (5, 2)
    with pytest.raises(CountError, match=r"non-negative integer.*5\.0") as err:
        dg.sample(5.0)
    assert isinstance(err.value, TypeError)
    with pytest.raises(CountError, match="non-negative integer.*-1"):
        dg.sample(-1)


def test_replicas_draw_distinct_streams_that_do_not_depend_on_replica_count(deployed):
    multiplexed = deployed(chain_graph(2, num_actors=2), seed=4)
    single = deployed(chain_graph(2, chunk=4), seed=4)  # the same chunk grid: [4, 4]
    a = multiplexed.to_arrays(multiplexed.sample(8))
    b = single.to_arrays(single.sample(8))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    noise = a["n1.value"] - a["n0.value"]
    assert not np.allclose(noise[:4], noise[4:])  # each replica drew its own stream
    again = multiplexed.to_arrays(multiplexed.sample(8))
    assert not np.allclose(again["n0.value"], a["n0.value"])  # new calls, new streams


def test_k15_two_graphs_in_one_process(deployed):
    graph = chain_graph(2)
    described = graph.describe()
    first, second = deployed(graph, seed=5), deployed(graph, seed=6)
    assert init_ray() is None  # Ray is reused, not initialised twice
    first.append(first.sample(4))
    second.append(second.sample(6))
    assert first.store.stats()["total"] == 4
    assert second.store.stats()["total"] == 6
    actors = first.actors
    assert len(actors) == 3  # two nodes and the store
    first.shutdown()
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.ready.remote(), timeout=30)
    assert second.to_arrays(second.sample(2))["n1.value"].shape == (2, 2)  # unaffected
    assert graph.describe() == described


def test_k06_trace_without_a_key_is_rejected_at_append(deployed):
    dg = deployed(chain_graph(2), seed=7)
    dg.append(dg.sample(4))
    partial = dg.sample(4).select(["n0.value", "n1.value"])
    with pytest.raises(StoreError, match=r"missing \['n0\.log_prob'\]"):
        dg.append(partial)
    assert dg.store.stats()["total"] == 4


def test_inference_methods_and_resimulation(deployed):
    dg = deployed(estimator_graph(steps=0), seed=8)
    posterior = dg.to_arrays(dg.sample_posterior(16))
    assert sorted(posterior) == ["theta.log_prob", "theta.value"]
    np.testing.assert_array_equal(posterior["theta.value"], np.ones((16, 2)))  # fake: x_o[0]
    seen = dg.status()["theta"]["estimator"]["seen_shapes"]
    assert seen == [{"x": (1, 2)}]  # the observation arrives as one broadcast row
    other = dg.to_arrays(dg.sample_proposal(4, observations={"x": np.array([5.0, 6.0])}))
    np.testing.assert_array_equal(other["theta.value"], np.full((4, 2), 5.0))
    ppd = dg.to_arrays(dg.sample_ppd(16))
    assert sorted(ppd) == ["s.value", "theta.log_prob", "theta.value", "x.value"]
    np.testing.assert_allclose(
        ppd["s.value"], ppd["theta.value"], atol=1.0
    )  # s simulated from theta
    assert not np.allclose(ppd["x.value"], [1.0, 2.0])  # x re-simulated, not the observation
    joint = dg.simulate_from_proposal(16)
    dg.append(joint)
    assert dg.store.stats()["total"] == 16


def test_estimator_nodes_cannot_be_multiplexed():
    graph = variant(estimator_graph(steps=0), theta={"num_actors": 2})
    dg = DeployedGraph(graph)
    with pytest.raises(ConfigError, match=r"graph\.theta\.num_actors.*cannot be multiplexed"):
        dg.deploy()
    assert dg.actors == []


def test_sampling_before_deploy_is_an_error():
    with pytest.raises(Exception, match="not deployed"):
        DeployedGraph(chain_graph(2)).sample(2)


def test_crashed_simulator_actor_is_restarted_and_its_call_retried(deployed, tmp_path):
    graph = chain_graph(2).add_node(
        "y", Spec(CrashOnce, {"marker": tmp_path / "crashed"}), parents=["n1"]
    )
    dg = deployed(graph, seed=10)
    arrays = dg.to_arrays(dg.sample(8))  # y's actor dies in this call, restarts, runs it again
    assert (tmp_path / "crashed").exists()
    np.testing.assert_array_equal(arrays["y.value"], arrays["n1.value"])
    expected = sample_forward(chain_graph(2), 8, seed=10)  # y is last in forward order
    np.testing.assert_array_equal(arrays["n1.value"], expected["n1.value"])


def test_given_samples_are_checked_and_scored_by_the_node_actors(deployed):
    dg = deployed(chain_graph(3, num_actors=2, chunk=100), seed=10)
    drawn = dg.to_arrays(dg.sample(250))
    values = {m: drawn[f"{m}.value"] for m in ("n0", "n1", "n2")}
    trace = dg.ingest(values)
    assert trace.keys() == [
        "n0.value",
        "n0.log_prob",
        "n1.value",
        "n2.value",
    ]  # a prior simulation's keys
    again = dg.to_arrays(trace)
    for key, value in drawn.items():  # values as given; the prior's log_prob as when simulated
        np.testing.assert_array_equal(again[key], value)
    dg.append(trace)
    assert dg.store.stats()["total"] == 250
    with pytest.raises(OutputTypeError, match="node 'n1'"):
        dg.ingest({**values, "n1": np.full((250, 2), "a")})  # checked as a simulator's output is
    with pytest.raises(ShapeError, match="different numbers of samples"):
        dg.ingest({**values, "n2": values["n2"][:5]})
    with pytest.raises(GraphError, match="no values for node 'n2'"):
        dg.ingest({"n0": values["n0"], "n1": values["n1"]})
    assert dg.ingest({m: v[:0] for m, v in values.items()}).n == 0
