"""K24: a non-finite observation is refused where it enters, naming the node, index and value."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import ConfigError, Graph, Product, check_observation, load_config
from kestrel_core.graph._observe import check_finite_observation, first_nonfinite

from .test_config import BASE, write_run


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_k24_non_finite_observation_file_is_refused_at_config_load(tmp_path, bad):
    path = write_run(tmp_path, obs=np.array([0.4, bad]))
    with pytest.raises(ConfigError) as err:
        load_config(path)  # before anything starts: no Ray, no estimator
    message = str(err.value)
    assert message.startswith("graph.x.observed: node 'x': observation ")
    assert f"obs.npy holds {bad} at index 1 (1 non-finite value of 2)" in message
    assert "an observation must be finite" in message
    assert "theta" not in message  # never an error about another node (its prior)


def test_k24_in_memory_observation_is_refused_too():
    graph = Graph()
    graph.add_node("z", Product([["uniform", 0.0, 1.0]] * 2))
    with pytest.raises(ConfigError, match=r"graph.x.observed: node 'x': observation holds -inf "):
        graph.add_node("x", "m.Sim", parents=["z"], observed=np.array([0.4, -np.inf]))
    config = {**BASE, "graph": {**BASE["graph"]}}
    config["graph"]["x"] = {**BASE["graph"]["x"], "observed": [[0.0, 1.0], [np.nan, 2.0]]}
    with pytest.raises(ConfigError, match=r"holds nan at index \(1, 0\)"):
        load_config(config, check_targets=())


def test_k24_check_observation_refuses_non_finite_values():
    with pytest.raises(ConfigError, match=r"node 'x': observation holds nan at index 2"):
        check_observation("x", np.array([0.0, 1.0, np.nan]), (3,))
    with pytest.warns(UserWarning, match="without the leading axis"):
        with pytest.raises(ConfigError, match=r"index 0 \(2 non-finite values of 2\)"):
            check_observation("x", np.full((1, 2), np.inf), (2,))
    assert check_observation("x", np.arange(3), (3,)).tolist() == [0, 1, 2]  # ints: finite


def test_first_nonfinite_finds_the_first_in_c_order():
    assert first_nonfinite(np.ones((2, 3))) is None and first_nonfinite([1, 2]) is None
    arr = np.zeros((2, 3), dtype=np.float32)
    arr[1, 2], arr[1, 0] = np.inf, np.nan
    index, value, count = first_nonfinite(arr)
    assert index == (1, 0) and np.isnan(value) and count == 2
    assert first_nonfinite(np.array([1 + 1j, complex(0, np.inf)]))[0] == (1,)
    with pytest.raises(ValueError, match="condition 'x' holds nan at index"):
        check_finite_observation("theta", arr, "condition 'x'", ValueError)
