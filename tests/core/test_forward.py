"""sample_forward: shapes, log_prob, reproducibility, chunking, conditions, observations."""

import numpy as np
import pytest

from kestrel_core import (
    ConfigError,
    Graph,
    GraphError,
    KestrelError,
    Product,
    ShapeError,
    SimulatorError,
    sample_forward,
    seed_sequence,
    spawn_rngs,
)
from kestrel_core.testing import models

PRIOR = {
    "_target_": "kestrel_core.Product",
    "priors": [["uniform", 0.0, 1.0], ["normal", 0.0, 1.0]],
}


def chain(chunk=0, observed=None):
    return (
        Graph()
        .add_node("theta", PRIOR, sample_chunk_size=chunk)
        .add_node("mu", models.Shift, parents=["theta"])
        .add_node(
            "x",
            {"_target_": "kestrel_core.testing.models.Noise", "sigma": 0.5},
            parents=["mu"],
            observed=observed,
            sample_chunk_size=chunk,
        )
    )


def test_trace_keys_shapes_and_values():
    trace = sample_forward(chain(), 50, seed=1)
    assert list(trace) == ["theta.value", "theta.log_prob", "mu.value", "x.value"]
    assert trace["theta.value"].shape == (50, 2) and trace["theta.log_prob"].shape == (50,)
    assert trace["x.value"].shape == (50, 2) and trace["x.value"].dtype == np.float64
    np.testing.assert_array_equal(trace["mu.value"], trace["theta.value"])
    prior = Product(PRIOR["priors"])
    np.testing.assert_allclose(trace["theta.log_prob"], prior.log_prob(trace["theta.value"]))
    assert all(a.flags.c_contiguous and a.flags.writeable for a in trace.values())


def test_same_seed_is_bit_identical_and_other_seeds_differ():
    a, b = sample_forward(chain(), 20, seed=7), sample_forward(chain(), 20, seed=7)
    for key in a:
        assert a[key].tobytes() == b[key].tobytes()
    c = sample_forward(chain(), 20, seed=8)
    assert not np.array_equal(a["x.value"], c["x.value"])
    assert not np.array_equal(
        sample_forward(chain(), 20)["theta.value"], sample_forward(chain(), 20)["theta.value"]
    )


def test_streams_follow_the_documented_scheme():
    """Root seed → one child per node in forward order → one generator per chunk."""
    n = 10
    trace = sample_forward(chain(chunk=4), n, seed=3)
    node_seqs = seed_sequence(3).spawn(3)
    rngs = spawn_rngs(node_seqs[0], 3)
    prior = Product(PRIOR["priors"])
    expected = np.concatenate([prior.sample(k, rng) for k, rng in zip((4, 4, 2), rngs)])
    np.testing.assert_array_equal(trace["theta.value"], expected)


def test_chunking_calls_the_simulator_per_chunk_and_is_reproducible():
    models.Counting.built = 0
    sim = models.Counting()
    g = Graph().add_node("c", sim, sample_chunk_size=4)
    a = sample_forward(g, 10, seed=0)
    assert sim.calls == [4, 4, 2]
    b = sample_forward(g, 10, seed=0, chunk_size=3)
    assert sim.calls[3:] == [3, 3, 3, 1]
    c = sample_forward(g, 10, seed=0, chunk_size=0)
    assert sim.calls[7:] == [10]
    assert a["c.value"].shape == b["c.value"].shape == c["c.value"].shape == (10, 2)
    np.testing.assert_array_equal(a["c.value"], sample_forward(g, 10, seed=0)["c.value"])


def test_simulator_built_once_per_call():
    models.Counting.built = 0
    g = Graph().add_node("c", models.Counting, sample_chunk_size=2)
    sample_forward(g, 9, seed=0)
    assert models.Counting.built == 1
    sample_forward(g, 9, seed=0)
    assert models.Counting.built == 2


def test_parents_are_passed_in_listed_order_and_per_sample_simulate_works():
    g = (
        Graph()
        .add_node("a", models.Gauss, estimator=None)
        .add_node("b", {"_target_": "kestrel_core.testing.models.Gauss", "dim": 1})
        .add_node("ab", models.Concat, parents=["a", "b"])
        .add_node("ba", models.Concat, parents=["b", "a"])
        .add_node("twice", models.PerSample, parents=["a"])
    )
    t = sample_forward(g, 5, seed=0)
    np.testing.assert_array_equal(
        t["ab.value"], np.concatenate([t["a.value"], t["b.value"]], axis=1)
    )
    np.testing.assert_array_equal(
        t["ba.value"], np.concatenate([t["b.value"], t["a.value"]], axis=1)
    )
    np.testing.assert_array_equal(t["twice.value"], 2 * t["a.value"])


def test_user_code_cannot_corrupt_parent_values():
    g = Graph().add_node("theta", models.Gauss).add_node("m", models.Doubler, parents=["theta"])
    with pytest.raises(ValueError, match="read-only"):
        sample_forward(g, 3, seed=0)


def test_conditions_are_used_and_broadcast():
    g = chain()
    theta = np.arange(8.0).reshape(4, 2)
    t = sample_forward(g, 4, conditions={"theta": theta}, seed=0)
    np.testing.assert_array_equal(t["theta.value"], theta)
    np.testing.assert_array_equal(t["mu.value"], theta)
    assert "theta.log_prob" not in t
    assert not np.shares_memory(t["theta.value"], theta)
    one = sample_forward(g, 4, conditions={"mu": np.array([[1.0, 2.0]])}, seed=0)
    assert one["mu.value"].shape == (4, 2) and (one["mu.value"] == [1.0, 2.0]).all()
    assert one["mu.value"].flags.writeable


def test_conditioning_a_node_does_not_shift_other_streams():
    free = sample_forward(chain(), 6, seed=5)
    fixed = sample_forward(chain(), 6, conditions={"mu": free["mu.value"]}, seed=5)
    np.testing.assert_array_equal(free["x.value"], fixed["x.value"])


def test_bad_conditions():
    with pytest.raises(
        ShapeError,
        match=r"condition 'theta' has leading dimension 5; expected 1 \(broadcast\) or 100",
    ):
        sample_forward(chain(), 100, conditions={"theta": np.zeros((5, 2))})
    with pytest.raises(
        GraphError, match=r"conditions: unknown node 'thta' \(did you mean 'theta'\?\)"
    ):
        sample_forward(chain(), 3, conditions={"thta": np.zeros((3, 2))})
    with pytest.raises(ShapeError, match="shape \\(\\)"):
        sample_forward(chain(), 3, conditions={"theta": 1.0})


def test_counts_are_checked_and_zero_gives_an_empty_trace():
    assert sample_forward(chain(), 0, seed=0) == {}
    assert sample_forward(chain(), np.int64(2), seed=0)["x.value"].shape == (2, 2)
    for bad in (-1, 2.0, True):
        with pytest.raises((TypeError, ValueError)):
            sample_forward(chain(), bad)


def test_invalid_graph_and_failing_simulator_are_named():
    with pytest.raises(GraphError, match="unknown node 'thta'"):
        sample_forward(Graph().add_node("x", models.Shift, parents=["thta"]), 2)
    with pytest.raises(ConfigError, match=r"graph\.x\.simulator: cannot import 'nowhere_mod\.Sim'"):
        sample_forward(Graph().add_node("x", "nowhere_mod.Sim"), 2)
    with pytest.raises(
        SimulatorError,
        match=r"node 'x': building simulator kestrel_core\.testing\.models\.Needs failed: TypeError",
    ):
        sample_forward(Graph().add_node("x", models.Needs), 2)


def test_k08_observation_checked_against_simulated_shape():
    assert sample_forward(chain(observed=np.zeros(2)), 3, seed=0)["x.value"].shape == (3, 2)
    with pytest.raises(
        ShapeError,
        match=r"node 'x': 5 observations given, one expected \(per-sample shape \(2,\)\)",
    ):
        sample_forward(chain(observed=np.zeros((5, 2))), 3, seed=0)
    with pytest.raises(ShapeError, match=r"node 'x': observation has shape \(\)"):
        sample_forward(chain(observed=np.float64(1.0)), 3, seed=0)
    with pytest.warns(UserWarning, match=r"shape \(1, 2\)") as record:
        sample_forward(chain(observed=np.zeros((1, 2))), 3, seed=0)
    assert record[0].filename == __file__


def test_scalar_per_sample_shape():
    g = (
        Graph()
        .add_node("theta", models.Gauss)
        .add_node("s", models.Scalar, parents=["theta"], observed=np.float64(0.5))
    )
    t = sample_forward(g, 4, seed=0)
    assert t["s.value"].shape == (4,)
    np.testing.assert_allclose(t["s.value"], t["theta.value"].sum(axis=1))


def test_errors_are_kestrel_errors():
    with pytest.raises(KestrelError):
        sample_forward(chain(observed=np.zeros(7)), 2, seed=0)
