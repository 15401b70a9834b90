"""A graph built in Python (issue 33 item 1): its config is its YAML's — classes by import path,
priors by their parameters, arrays as lists, observations saved beside the YAML — with the
YAML path's errors; what cannot be imported back by name is refused (numpy only)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kestrel_core import (
    BufferConfig,
    ConfigError,
    Graph,
    GraphError,
    MultivariateNormal,
    Product,
    SampleConfig,
    Spec,
    load_config,
    sample_forward,
)
from kestrel_core.testing import models

MODELS = "kestrel_core.testing.models"
BUFFER = {"min_samples": 64, "max_samples": 128, "validation_samples": 16}
GAUSSIAN = "kestrel_torch.GaussianPosterior"


def two_nodes(base_dir, observed=None, x=None) -> Graph:
    """theta ~ a correlated Gaussian (by its precision), x = theta + noise."""
    prior = MultivariateNormal([0.0, 1.0], precision=np.array([[2.0, 0.5], [0.5, 1.0]]))
    g = Graph(base_dir=base_dir)
    g.add_node("theta", prior=prior, evidence=["x"], estimator=(GAUSSIAN, {"max_epochs": 3}))
    g.add_node(
        "x",
        x or (models.Noise, {"sigma": np.float64(0.2)}),
        parents=["theta"],
        observed=np.array([0.4, 0.6]) if observed is None else observed,
        sample_chunk_size=16,
        names=["a", "b"],
    )
    return g


def test_the_yaml_record_loads_to_the_python_config(tmp_path):
    g = two_nodes(tmp_path)
    sections = {"buffer": BUFFER, "sample": {"posterior": {"n": 9}}, "deterministic": True}
    cfg = load_config({"graph": g, **sections})
    path = g.save(tmp_path / "config.yml", **sections)
    assert (tmp_path / "observed_x.npy").is_file()
    text = (tmp_path / "config.yml").read_text()
    assert text == g.to_yaml(**sections)
    data = yaml.safe_load(text)
    assert data["graph"]["x"] == {
        "simulator": {"_target_": f"{MODELS}.Noise", "sigma": 0.2},
        "parents": ["theta"],
        "observed": "observed_x.npy",
        "sample_chunk_size": 16,
        "names": ["a", "b"],
    }
    assert data["graph"]["theta"] == {
        "simulator": {
            "_target_": "kestrel_core.MultivariateNormal",
            "mean": [0.0, 1.0],
            "precision": [[2.0, 0.5], [0.5, 1.0]],
        },
        "evidence": ["x"],
        "estimator": {"_target_": GAUSSIAN, "max_epochs": 3},
    }
    assert list(data) == ["buffer", "deterministic", "graph", "sample"]
    loaded = load_config(path)
    py, file = cfg.to_dict(), loaded.to_dict()
    assert py["graph"]["x"].pop("observed").startswith("<array")
    assert file["graph"]["x"].pop("observed") == str(tmp_path / "observed_x.npy")
    assert py == file
    np.testing.assert_array_equal(cfg.graph.observations["x"], loaded.graph.observations["x"])
    # the same forward draws for a seed
    a, b = sample_forward(cfg.graph, 20, seed=3), sample_forward(loaded.graph, 20, seed=3)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_the_forms_of_a_simulator_and_the_config_dataclasses(tmp_path):
    mean = np.zeros(2, dtype=np.float32)
    forms = [
        (models.Noise, {"sigma": 0.2}),
        (f"{MODELS}.Noise", {"sigma": 0.2}),
        Spec(models.Noise, {"sigma": 0.2}),
        {"_target_": models.Noise, "sigma": 0.2},
    ]
    for form in forms:
        g = two_nodes(tmp_path, x=form)
        assert yaml.safe_load(g.to_yaml(buffer=BUFFER))["graph"]["x"]["simulator"] == {
            "_target_": f"{MODELS}.Noise",
            "sigma": 0.2,
        }
    g = Graph(base_dir=tmp_path).add_node("z", models.Gauss)
    g.add_node("y", (models.Shift, {"offset": mean}), parents=["z"])
    sections = {"buffer": BufferConfig(**BUFFER), "sample": {"prior": SampleConfig(n=5)}}
    data = yaml.safe_load(g.to_yaml(**sections))
    assert data["graph"] == {
        "z": {"simulator": f"{MODELS}.Gauss"},
        "y": {"simulator": {"_target_": f"{MODELS}.Shift", "offset": [0.0, 0.0]}, "parents": ["z"]},
    }
    assert data["buffer"]["simulate_count"] == 64 and data["sample"]["prior"]["n"] == 5
    assert load_config({**data, "graph": g}).sample["prior"].n == 5


def test_a_product_prior_is_recorded_by_its_entries(tmp_path):
    prior = Product([["normal", 0, 1]] * 3 + [["uniform", 0.0, 2.0]])
    g = Graph(base_dir=tmp_path).add_node("theta", prior=prior)
    text = g.to_yaml()
    assert "- [normal, 0.0, 1.0, {repeat: 3}]\n" in text and "- [uniform, 0.0, 2.0]\n" in text
    built = load_config(yaml.safe_load(text)).graph["theta"].simulator.build()
    assert built.specs == prior.specs


def test_an_observation_file_is_named_not_copied(tmp_path):
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "obs.npz", x=np.array([0.1, 0.2]), other=np.zeros(3))
    g = two_nodes(tmp_path, observed="data/obs.npz['x']")
    assert g.observed_source("x") == f"{tmp_path}/data/obs.npz['x']"
    assert "observed: data/obs.npz['x']\n" in g.to_yaml(buffer=BUFFER)
    elsewhere = tmp_path / "configs" / "run.yml"
    g.save(elsewhere, buffer=BUFFER)
    data = yaml.safe_load(elsewhere.read_text())
    assert data["graph"]["x"]["observed"] == f"{tmp_path}/data/obs.npz['x']"
    assert data["paths"] == {"imports": [".."]}  # the graph's folder stays its code folder
    assert not list((tmp_path / "configs").glob("*.npy"))
    loaded = load_config(elsewhere)
    assert loaded.paths.imports == (str(tmp_path),)
    np.testing.assert_array_equal(loaded.graph.observations["x"], [0.1, 0.2])


def test_what_cannot_be_imported_back_by_name_is_refused_naming_the_node(tmp_path):
    class Local:
        def simulate_batch(self, theta):
            return theta

    in_main = type("Noise", (), {"__module__": "__main__"})
    remedy = "put it in a module next to the notebook or script (e.g. model.py)"
    cases = [
        (in_main, r"graph\.x\.simulator: class Noise is defined in the notebook or script itself"),
        ((in_main, {"sigma": 1.0}), r"graph\.x\.simulator: class Noise is defined in the notebook"),
        (Local, r"graph\.x\.simulator: class .*<locals>.Local is defined inside a function"),
        (lambda theta: theta, r"graph\.x\.simulator: .*<lambda> is a lambda"),
    ]
    for simulator, message in cases:
        g = two_nodes(tmp_path, x=simulator)
        for call in (lambda g=g: load_config({"graph": g, "buffer": BUFFER}), g.to_yaml):
            with pytest.raises(ConfigError, match=message) as info:
                call()
            assert remedy in str(info.value)
    g = two_nodes(tmp_path, x=models.Noise(sigma=0.1))
    with pytest.raises(ConfigError, match=r"graph\.x\.simulator: a live .*Noise instance cannot"):
        load_config({"graph": g})
    nested = {"_target_": f"{MODELS}.Inner", "inner": {"_target_": in_main}}
    with pytest.raises(ConfigError, match=r"graph\.x\.simulator\.inner\._target_: class Noise"):
        two_nodes(tmp_path, x=nested).to_yaml()
    g = two_nodes(tmp_path, x=(models.Noise, {"sigma": object()}))
    with pytest.raises(ConfigError, match=r"graph\.x\.simulator\.sigma: a value of type object"):
        g.to_yaml()
    with pytest.raises(ConfigError, match=r"graph: the graph is this Graph's nodes"):
        two_nodes(tmp_path).to_yaml(graph={})
    with pytest.raises(GraphError, match=r"graph: no nodes"):
        Graph().to_yaml(buffer=BUFFER)
    with pytest.raises(ConfigError, match=r"config: a Graph is the config's graph section; give"):
        load_config(two_nodes(tmp_path))


def _error(call) -> tuple[type, str]:
    with pytest.raises((ConfigError, GraphError)) as info:
        call()
    return type(info.value), str(info.value)


def test_bad_graphs_give_the_errors_of_the_yaml(tmp_path):
    noise = f"{MODELS}.Noise"
    # an unknown parent; a cycle
    g = Graph().add_node("x", models.Noise, parents=["thta"]).add_node("theta", models.Gauss)
    yml = {
        "graph": {
            "x": {"simulator": noise, "parents": ["thta"]},
            "theta": {"simulator": f"{MODELS}.Gauss"},
        }
    }
    assert _error(lambda: load_config({"graph": g})) == _error(lambda: load_config(yml))
    assert _error(g.to_yaml) == _error(lambda: load_config(yml))
    assert "did you mean 'theta'" in _error(g.to_yaml)[1]
    g = (
        Graph()
        .add_node("a", models.Noise, parents=["b"])
        .add_node("b", models.Noise, parents=["a"])
    )
    yml = {
        "graph": {
            "a": {"simulator": noise, "parents": ["b"]},
            "b": {"simulator": noise, "parents": ["a"]},
        }
    }
    assert _error(g.to_yaml) == _error(lambda: load_config(yml))
    assert _error(lambda: load_config({"graph": g})) == _error(lambda: load_config(yml))
    # a node without prior or simulator; a bad field; a bad section
    yml = {"graph": {"x": {"parents": []}}}
    assert _error(lambda: Graph().add_node("x")) == _error(lambda: load_config(yml))
    yml = {"graph": {"x": {"simulator": noise, "num_actors": 0}}}
    assert _error(lambda: Graph().add_node("x", noise, num_actors=0)) == _error(
        lambda: load_config(yml)
    )
    g = Graph().add_node("x", models.Noise)
    yml = {"buffer": {"min_sample": 1}, "graph": {"x": {"simulator": noise}}}
    assert _error(lambda: g.to_yaml(buffer={"min_sample": 1})) == _error(lambda: load_config(yml))
    bad = {"graph": g, "buffer": {"min_sample": 1}}
    assert _error(lambda: load_config(bad)) == _error(lambda: load_config(yml))
    # prior= and simulator= / a prior with parents
    with pytest.raises(ConfigError, match=r"graph\.t: give prior= or simulator=, not both"):
        Graph().add_node("t", models.Noise, prior=Product([["normal", 0, 1]]))
    with pytest.raises(
        ConfigError, match=r"graph\.t\.parents: a node with a prior= has no parents"
    ):
        Graph().add_node("t", prior=Product([["normal", 0, 1]]), parents=["x"])
