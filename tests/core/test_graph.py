"""Graph, Node, Spec, instantiate, import_target: building, validation, orders, description."""

import dataclasses
import fractions
import sys

import numpy as np
import pytest

from kestrel_core import (
    ConfigError,
    Graph,
    GraphError,
    Node,
    Product,
    Spec,
    import_target,
    instantiate,
)
from kestrel_core.testing import models

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["normal", 0.0, 1.0]] * 3}


def example05(**theta):
    """theta(evidence x, scaffolds mu) → mu → x (observed), as in examples/05."""
    return (
        Graph()
        .add_node("theta", PRIOR, evidence=["x"], scaffolds=["mu"], **theta)
        .add_node("mu", models.Shift, parents=["theta"])
        .add_node("x", models.Noise(0.1), parents=["mu"], observed=np.zeros(3))
    )


# --- building -------------------------------------------------------------------------------


def test_add_node_is_chainable_and_keeps_config_order():
    g = example05()
    assert list(g.nodes) == ["theta", "mu", "x"] and len(g) == 3 and "mu" in g
    node = g["theta"]
    assert isinstance(node, Node) and dataclasses.is_dataclass(node)
    assert node.evidence == ("x",) and node.scaffolds == ("mu",) and node.parents == ()
    assert node.num_actors == 1 and node.sample_chunk_size == 0 and node.ray == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.parents = ("mu",)
    assert g.validate() is g


def test_simulator_forms_become_specs():
    g = (
        Graph()
        .add_node("a", "kestrel_core.testing.models.Gauss")
        .add_node("b", {"_target_": "kestrel_core.testing.models.Gauss", "dim": 2})
        .add_node("c", models.Gauss)
        .add_node("d", models.Gauss(dim=4))
        .add_node("e", Spec(models.Gauss, {"dim": 5}))
    )
    specs = {n: node.simulator for n, node in g.nodes.items()}
    assert specs["a"] == Spec("kestrel_core.testing.models.Gauss", {})
    assert specs["b"].kwargs == {"dim": 2}
    assert specs["c"].target is models.Gauss and not specs["c"].is_live
    assert (
        specs["d"].is_live
        and specs["d"].target_name == "<kestrel_core.testing.models.Gauss instance>"
    )
    assert [s.build().dim for s in specs.values()] == [3, 2, 3, 4, 5]
    assert specs["d"].build() is specs["d"].target
    assert specs["c"].build() is not specs["c"].build()


@pytest.mark.parametrize("name", ["a.b", "", "1x", "has space", 3])
def test_node_names_must_be_identifiers(name):
    with pytest.raises(GraphError, match="must be an identifier"):
        Graph().add_node(name, models.Gauss)


def test_duplicate_node_and_bad_fields():
    g = Graph().add_node("a", models.Gauss)
    with pytest.raises(GraphError, match="graph.a: node 'a' is already in the graph"):
        g.add_node("a", models.Gauss)
    with pytest.raises(ConfigError, match=r"graph\.b\.simulator: required \(every node needs a"):
        g.add_node("b", None)
    with pytest.raises(ConfigError, match=r"graph\.b\.parents\[1\]: expected a node name"):
        g.add_node("b", models.Gauss, parents=["a", 2])
    with pytest.raises(
        ConfigError, match=r"graph\.b\.num_actors: expected an integer ≥ 1, found True"
    ):
        g.add_node("b", models.Gauss, num_actors=True)
    with pytest.raises(
        ConfigError,
        match=r"graph\.b\.ray\.num_gpu: unknown Ray actor option 'num_gpu' \(did you mean 'num_gpus'\?\)",
    ):
        g.add_node("b", models.Gauss, ray={"num_gpu": 1})
    with pytest.raises(ConfigError, match="live instance; it takes no kwargs"):
        Spec(models.Gauss(), {"dim": 1})
    assert list(g.nodes) == ["a"]


def test_numpy_integers_are_accepted_for_counts():
    g = Graph().add_node("a", models.Gauss, num_actors=np.int64(2), sample_chunk_size=np.int32(8))
    assert g["a"].num_actors == 2 and type(g["a"].num_actors) is int


def test_observations_are_read_only_native_copies():
    data = np.arange(3, dtype=">f8")
    g = Graph().add_node("x", models.Gauss, observed=data)
    obs = g.observations["x"]
    assert obs.dtype == np.dtype("float64") and obs.dtype.isnative and obs.flags.c_contiguous
    assert not obs.flags.writeable and not np.shares_memory(obs, data)
    np.testing.assert_array_equal(obs, [0.0, 1.0, 2.0])


def test_observed_path_relative_to_base_dir(tmp_path):
    np.save(tmp_path / "obs.npy", np.ones(2))
    g = Graph(base_dir=tmp_path).add_node("x", models.Gauss, observed="obs.npy")
    np.testing.assert_array_equal(g.observations["x"], [1.0, 1.0])
    with pytest.raises(ConfigError, match=r"graph\.y\.observed: observation file not found"):
        g.add_node("y", models.Gauss, observed="missing.npy")


def test_getitem_suggests_names():
    with pytest.raises(GraphError, match="did you mean 'theta'"):
        example05()["thet"]


# --- validation -----------------------------------------------------------------------------


def test_unknown_reference_names_key_path_and_suggestion():
    g = Graph().add_node("theta", models.Gauss).add_node("x", models.Noise, parents=["thta"])
    with pytest.raises(GraphError) as info:
        g.validate()
    assert str(info.value) == "graph.x.parents[0]: unknown node 'thta' (did you mean 'theta'?)"


def test_every_structure_problem_is_listed():
    g = (
        Graph()
        .add_node("a", models.Gauss, evidence=["a"], scaffolds=["zz"])
        .add_node("b", models.Gauss, estimator="m.Est", parents=["a", "a"])
        .add_node("c", models.Gauss, estimator="m.Est", evidence=["a"], observed=np.zeros(1))
    )
    with pytest.raises(GraphError) as info:
        g.validate()
    text = str(info.value)
    assert text.startswith("5 problems:")
    for part in (
        "graph.a.evidence[0]: node 'a' cannot list itself in evidence",
        "graph.a.scaffolds[0]: unknown node 'zz'",
        "graph.b.parents[1]: 'a' is listed twice",
        "graph.b.estimator: node 'b' has an estimator but no evidence",
        "graph.c.observed: node 'c' is observed and has an estimator",
    ):
        assert part in text


def test_cycle_is_named():
    g = (
        Graph()
        .add_node("a", models.Shift, parents=["c"])
        .add_node("b", models.Shift, parents=["a"])
        .add_node("c", models.Shift, parents=["b"])
        .add_node("d", models.Gauss)
    )
    with pytest.raises(GraphError, match=r"graph: cycle in parents: a -> c -> b -> a"):
        g.validate()
    with pytest.raises(GraphError, match="cycle"):
        _ = g.forward_order


def test_empty_graph_is_invalid():
    with pytest.raises(GraphError, match="no nodes"):
        Graph().validate()


# --- orders ---------------------------------------------------------------------------------


def test_forward_order_is_topological_with_ties_in_config_order():
    g = (
        Graph()
        .add_node("x", models.Concat, parents=["b", "a"])
        .add_node("b", models.Gauss)
        .add_node("m", models.Shift, parents=["a"])
        .add_node("a", models.Gauss)
    )
    assert g.forward_order == ["b", "a", "x", "m"]


def test_inference_order_of_example05():
    g = example05(estimator="kestrel_torch.GaussianPosterior")
    assert g.forward_order == ["theta", "mu", "x"]
    assert g.inference_order == ["x", "theta"]
    assert g.latents == ["theta"]
    assert list(g.observations) == ["x"]


def test_inference_order_includes_deterministic_intermediates():
    # theta → x (observed) → s (summary of x) → theta's evidence; plus an unrelated node
    g = (
        Graph()
        .add_node("theta", PRIOR, estimator="m.Est", evidence=["s"])
        .add_node("other", models.Gauss)
        .add_node("s", models.Shift, parents=["x"])
        .add_node("x", models.Noise, parents=["theta"], observed=np.zeros(3))
    )
    assert g.inference_order == ["x", "s", "theta"]


def test_hierarchical_latents_follow_their_evidence():
    g = (
        Graph()
        .add_node("hyper", PRIOR, estimator="m.Est", evidence=["theta", "x"])
        .add_node("theta", models.Shift, parents=["hyper"], estimator="m.Est", evidence=["x"])
        .add_node("x", models.Noise, parents=["theta"], observed=np.zeros(3))
    )
    assert g.inference_order == ["x", "theta", "hyper"]


def test_evidence_depending_on_its_latent_is_an_inference_cycle():
    g = (
        Graph()
        .add_node("theta", PRIOR, estimator="m.Est", evidence=["s"])
        .add_node("s", models.Shift, parents=["theta"])
    )
    with pytest.raises(GraphError, match=r"inference order has the cycle theta -> s -> theta"):
        g.validate()


def test_k17_forgotten_observation_is_named_not_only_a_cycle():
    # the README's two nodes with `observed:` left out: the evidence needs data
    g = (
        Graph()
        .add_node("theta", PRIOR, estimator="m.Est", evidence=["x"])
        .add_node("x", models.Noise, parents=["theta"])
    )
    with pytest.raises(GraphError) as err:
        g.validate()
    assert "theta -> x -> theta" in str(err.value)
    # the cause first, the cycle after it (the tester read "cycle" as the problem)
    assert str(err.value).startswith(
        "graph: evidence 'x' of node 'theta' has no observation (set graph.x.observed)"
    )


# --- describe -------------------------------------------------------------------------------


def test_describe_shows_nodes_edges_observed_evidence_and_estimators():
    text = example05(estimator="kestrel_torch.GaussianPosterior").describe()
    lines = text.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["theta", "theta", "mu"]
    assert "kestrel_core.Product" in lines[0] and "← x" in lines[0]
    assert "estimator kestrel_torch.GaussianPosterior" in lines[0] and "scaffolds mu" in lines[0]
    assert lines[1].startswith("theta → mu") and "kestrel_core.testing.models.Shift" in lines[1]
    assert lines[2].startswith("mu → x  (observed (3,))")
    assert lines[3] == "Nodes: 3 | Observed: x | Estimators: theta"


# --- Spec, instantiate, import_target -------------------------------------------------------


def test_instantiate_builds_nested_targets_and_leaves_inputs_alone():
    spec = {
        "_target_": "kestrel_core.testing.models.Needs",
        "scale": 2,
        "inner": {"_target_": "kestrel_core.testing.models.Inner", "width": 4},
    }
    obj = instantiate(spec)
    assert (
        isinstance(obj, models.Needs)
        and isinstance(obj.inner, models.Inner)
        and obj.inner.width == 4
    )
    embedding = {"_target_": "nowhere.Net", "_input_": ["x"]}
    out = instantiate(
        {"a": [embedding, {"_target_": "fractions.Fraction", "numerator": 2, "denominator": 4}]}
    )
    assert out["a"][0] is embedding and out["a"][1] == fractions.Fraction(1, 2)
    assert spec["inner"] == {"_target_": "kestrel_core.testing.models.Inner", "width": 4}
    assert instantiate(None) is None and instantiate((1, "a")) == (1, "a")


def test_spec_build_does_not_share_kwargs_between_builds():
    spec = Spec(
        models.Needs, {"scale": 1, "inner": {"_target_": "kestrel_core.testing.models.Inner"}}
    )
    a, b = spec.build(), spec.build()
    assert a.inner is not b.inner
    assert spec.kwargs["inner"] == {"_target_": "kestrel_core.testing.models.Inner"}


def test_import_target_errors():
    assert import_target("kestrel_core.Product") is Product
    with pytest.raises(ConfigError, match="must be a dotted path"):
        import_target("Product")
    with pytest.raises(ConfigError, match="no module named 'nowhere_at_all'"):
        import_target("nowhere_at_all.Thing")
    with pytest.raises(
        ConfigError, match=r"'kestrel_core' has no attribute 'Prodcut' \(did you mean 'Product'\?\)"
    ):
        import_target("kestrel_core.Prodcut")


def test_import_errors_inside_a_user_module_are_reported(tmp_path):
    (tmp_path / "broken_mod.py").write_text("import not_installed_pkg\nclass A: pass\n")
    (tmp_path / "raising_mod.py").write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(ConfigError, match="needs 'not_installed_pkg', which is not installed"):
        import_target("broken_mod.A", [str(tmp_path)])
    with pytest.raises(ConfigError, match="RuntimeError: boom at import"):
        import_target("raising_mod.A", [str(tmp_path)])


def test_same_module_name_in_two_config_folders(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, value in ((one, 1), (two, 2)):
        folder.mkdir()
        (folder / "model.py").write_text(f"class Sim:\n    VALUE = {value}\n")
    first = import_target("model.Sim", [str(one)])
    second = import_target("model.Sim", [str(two)])
    assert (first.VALUE, second.VALUE) == (1, 2)
    assert import_target("model.Sim", [str(two)]) is second
    assert sys.modules["model"].__file__ == str(two / "model.py")
