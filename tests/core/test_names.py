"""The node option ``names`` (issue 9, item 8): checked where the config is loaded, with the
node and key named; its length must match the node's dimension."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kestrel_core import ConfigError, Graph, load_config


def _config(tmp_path, names, observed_names=None):
    np.savez(tmp_path / "obs.npz", x=np.zeros(4))
    x = {
        "simulator": {"_target_": "kestrel_core.Product", "priors": [["normal", 0.0, 1.0]] * 4},
        "observed": "obs.npz['x']",
    }
    if observed_names is not None:
        x["names"] = observed_names
    theta = {
        "simulator": {
            "_target_": "kestrel_core.Product",
            "priors": [["uniform", 0.1, 1.0], ["uniform", 0.05, 0.5]],
        },
        "names": names,
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"graph": {"theta": theta, "x": x}}))
    return path


def test_names_are_kept_on_the_node(tmp_path):
    cfg = load_config(_config(tmp_path, ["beta", "gamma"]))
    assert cfg.graph.nodes["theta"].names == ("beta", "gamma")
    assert cfg.graph.nodes["x"].names == ()


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["beta", "gamma", "delta"], "graph.theta.names: 3 names for 2 components"),
        (["beta"], "graph.theta.names: 1 name for 2 components"),
        (["beta", "beta"], "graph.theta.names: the name 'beta' is given twice"),
        ("beta", "graph.theta.names: expected a non-empty list of component names"),
        (["beta", 3], "graph.theta.names[1]: expected a non-empty name, found 3"),
    ],
)
def test_wrong_names_are_an_error_naming_node_and_key(tmp_path, names, message):
    with pytest.raises(ConfigError) as err:
        load_config(_config(tmp_path, names))
    assert message in str(err.value)


def test_names_of_an_observed_node_must_fit_its_observation(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(_config(tmp_path, ["beta", "gamma"], observed_names=["a", "b"]))
    assert "graph.x.names: 2 names for 4 components" in str(err.value)
    assert "its observation" in str(err.value)


def test_names_of_a_user_simulator_are_checked_against_its_samples_later():
    # the dimension of a user's simulator is known only once it runs: no error here
    g = Graph().add_node("y", "some_module.Simulator", names=["a", "b", "c"])
    assert g.nodes["y"].names == ("a", "b", "c")
