"""The observations given to one sampling call, as the Python API and the CLI take them: an
unnamed array where the graph observes several nodes names both ways to name one."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel.sample._observations import given_observations
from kestrel_core import ConfigError, Graph
from kestrel_core.testing import models

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["normal", 0.0, 1.0]] * 3}


def two_observed() -> Graph:
    return (
        Graph()
        .add_node("theta", PRIOR, evidence=["x1", "x2"])
        .add_node("x1", models.Noise, parents=["theta"], observed=np.zeros(3))
        .add_node("x2", models.Noise, parents=["theta"], observed=np.zeros(3))
    )


def test_an_unnamed_observation_with_two_observed_nodes_names_the_python_form_too():
    with pytest.raises(ConfigError) as err:
        given_observations(two_observed(), "posterior", np.ones(3))
    text = str(err.value)
    assert "observes 2 nodes (x1, x2)" in text
    assert "--observation NODE=FILE[:key]" in text and "observation={'NODE'" in text


def test_named_observations_are_checked_per_node():
    got = given_observations(two_observed(), "posterior", {"x1": np.ones(3), "x2": [2, 2, 2]})
    assert got["x1"].tolist() == [1.0, 1.0, 1.0] and got["x2"].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ConfigError, match="do not depend on an observation.*observation= from"):
        given_observations(two_observed(), "prior", {"x1": np.ones(3)})
