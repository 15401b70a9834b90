"""Arrays Kestrel cannot read as real numbers are refused where they enter (K24, K28, K36).

Complex arrays (their imaginary part would be dropped later, silently), masked arrays with
masked entries (numpy would hand on the values under the mask) and observation files numpy
cannot read as numbers are refused at the boundary with the node named — observations from
files, in-memory observations, simulator and estimator outputs alike. (That observations equal
in value have one digest, whatever dtype, is the application's: ``tests/app/test_input_kinds.py``.)
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from kestrel_core import ConfigError, Graph, OutputTypeError, call_simulator, load_observation
from kestrel_core.execute._boundary import as_record
from kestrel_core.graph._inputs import as_input

X = np.array([1.0, -2.0, 3.0])


def _files(tmp_path, value, allow_pickle=False):
    np.save(tmp_path / "x.npy", value, allow_pickle=allow_pickle)
    np.savez(tmp_path / "obs.npz", x=value, other=np.zeros(2))
    return ["x.npy", "obs.npz['x']"]


# -- complex ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.array([1 + 1j, 2, 3]), X + 5j, X.astype(np.complex64)])
def test_k28_complex_observation_rejected(tmp_path, value):
    for spec in _files(tmp_path, value):
        with pytest.raises(ConfigError) as err:
            load_observation(spec, tmp_path, node="x")
        text = str(err.value)
        assert text.startswith("node 'x': observation ")
        assert f"complex dtype {value.dtype}" in text and "real numbers" in text
        assert "\n" not in text
    with pytest.raises(ConfigError, match=r"node 'x': observation has complex dtype"):
        load_observation(value, node="x")  # in memory (the Python API)
    with pytest.raises(ConfigError, match=r"graph\.x\.observed: node 'x'.*complex dtype"):
        Graph(base_dir=tmp_path).add_node("x", "model.Sim", observed="x.npy")


def test_k28_complex_run_time_input_rejected_naming_it():
    with pytest.raises(ConfigError, match=r"node 'x': condition 'x' has complex dtype complex128"):
        as_input(X + 1j, "condition 'x'", node="x")


class _Complex:
    def simulate_batch(self, n, z):
        return z + 0j


class _ComplexPerSample:
    def simulate(self, z):
        return complex(z[0], 1.0)


@pytest.mark.parametrize("sim", [_Complex(), _ComplexPerSample()], ids=["batch", "per-sample"])
def test_k28_complex_simulator_output_rejected(sim):
    with pytest.raises(OutputTypeError) as err:
        call_simulator("x", sim, 4, {"z": np.zeros((4, 3))})
    text = str(err.value)
    assert text.startswith("node 'x': simulate")
    assert "complex dtype complex128" in text and "real numbers" in text


def test_k28_complex_estimator_output_rejected():
    out = {"value": np.zeros((2, 3)) + 1j, "log_prob": np.zeros(2)}
    with pytest.raises(OutputTypeError, match="node 'z': sample_posterior returned complex"):
        as_record("z", "sample_posterior", out, 2)


# -- masked arrays ------------------------------------------------------------------------------


def test_k28_masked_observation_rejected():
    masked = np.ma.masked_array(X, mask=[0, 1, 0])
    with pytest.raises(ConfigError) as err:
        load_observation(masked, node="x")
    assert str(err.value).startswith("node 'x': observation is a masked array with 1 masked")
    with pytest.raises(ConfigError, match="graph.x.observed: node 'x'.*masked array"):
        Graph().add_node("x", "model.Sim", observed=masked)
    # nothing masked: the data itself
    out = load_observation(np.ma.masked_array(X), node="x")
    assert type(out) is np.ndarray and out.tolist() == X.tolist()


class _Masked:
    def simulate_batch(self, n, z):
        return np.ma.masked_array(z + 1.0, mask=z > 0)


def test_k28_masked_simulator_output_rejected():
    z = np.array([[-1.0, 1.0], [-1.0, -1.0]])
    with pytest.raises(OutputTypeError, match=r"node 'x': simulate_batch\(2, …\).*1 masked entry"):
        call_simulator("x", _Masked(), 2, {"z": z})
    out = call_simulator("x", _Masked(), 1, {"z": z[1:]})  # nothing masked: its data
    assert type(out) is np.ndarray and out.tolist() == [[0.0, 0.0]]


# -- unreadable observation files ---------------------------------------------------------------


def test_k24_object_array_observation_file_is_one_line_naming_node_and_file(tmp_path):
    _files(tmp_path, np.array([1.0, 2.0, None], dtype=object), allow_pickle=True)
    for spec, where in [("x.npy", "x.npy"), ("obs.npz['x']", "obs.npz['x']")]:
        with pytest.raises(ConfigError) as err:
            load_observation(spec, tmp_path, node="x")
        text = str(err.value)
        assert text.startswith(f"node 'x': observation {os.path.join(tmp_path, where)}")
        assert "numeric array" in text and "\n" not in text
        assert err.value.__cause__ is None  # no numpy frames
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    with pytest.raises(ConfigError, match=r"node 'x': observation .*bad.npy cannot be read"):
        load_observation("bad.npy", tmp_path, node="x")


@pytest.mark.parametrize("name", ["obs.npy", "obs.npz"])
def test_k24_a_text_file_named_npy_is_not_called_an_object_array(tmp_path, name):
    """A CSV renamed ``.npy`` was reported as "holds Python objects (an object array)"."""
    (tmp_path / name).write_text("0.1,0.2,0.3\n")
    with pytest.raises(ConfigError) as err:
        load_observation(name, tmp_path, node="x")
    text = str(err.value)
    assert "not a numpy" in text and "numpy.loadtxt" in text and "\n" not in text
    assert "Python objects" not in text
