"""K08: one rule for an observation with a leading axis of 1, wherever the node's shape is known.

The per-sample shape ``D`` of a node is known once it is simulated (``kestrel simulate``, the
launch's dry run) or from the run's own observation (sampling at another observation): an
observation of shape ``(1, *D)`` then becomes ``D`` with a warning, anything else but ``D`` is
refused naming both shapes, and no later step sees ``(1, 1, *D)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import Graph, ShapeError, sample_forward
from kestrel_core.graph._observe import fit_given_observation
from kestrel_core.testing.models import Shift

X = np.array([1.0, -2.0, 3.0])
PRIOR = {"_target_": "kestrel_core.Product", "priors": [["uniform", -1, 1]] * 3}


def graph(observed) -> Graph:
    return (
        Graph()
        .add_node("z", PRIOR)
        .add_node("x", Shift(1.0), parents=["z"], observed=observed)
        .validate()
    )


def test_k08_graph_fits_a_leading_one_once_the_shape_is_known():
    g = graph(X[None])
    assert "note: node 'x': observation of shape (1, 3)" in g.describe()
    with pytest.warns(UserWarning, match=r"node 'x': observation has shape \(1, 3\).*\(3,\)"):
        fitted = g.fit_observation("x", (3,))
    assert fitted.shape == (3,) and g.observations["x"].shape == (3,)
    assert not g.observations["x"].flags.writeable
    assert "note:" not in g.describe()
    with pytest.raises(ShapeError, match="5 observations given, one expected"):
        graph(np.tile(X, (5, 1))).fit_observation("x", (3,))
    with pytest.raises(ShapeError, match=r"shape \(3, 1\).*\(3,\)"):
        graph(X[:, None]).fit_observation("x", (3,))


def test_k08_simulate_fits_the_graphs_observation():
    g = graph(X[None])
    with pytest.warns(UserWarning, match=r"\(1, 3\)"):
        sample_forward(g, 4, seed=0)
    assert g.observations["x"].shape == (3,)


def test_k08_given_observation_follows_the_runs_own_shape():
    g = graph(X)
    with pytest.warns(UserWarning, match=r"\(1, 3\)"):
        assert fit_given_observation(g, "x", X[None]).shape == (3,)
    assert fit_given_observation(g, "x", X).shape == (3,)
    with pytest.raises(ShapeError, match="5 observations given"):
        fit_given_observation(g, "x", np.tile(X, (5, 1)))
    assert fit_given_observation(g, "z", np.zeros((1, 3))).shape == (1, 3)  # no own shape
