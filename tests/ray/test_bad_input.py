"""Bad input through node actors and the driver's door (K25, K27, K28) and the Ray dashboard
off by default (issue 11, security)."""

from __future__ import annotations

import numpy as np
import pytest
import ray

from kestrel_core import ConfigError, Graph, OutputTypeError, SimulatorError, Spec
from kestrel_core._errors import InputWriteError
from kestrel_core.testing.models import Doubler, GaussPrior, Probe
from kestrel_ray.graph._arrays import given_columns, observation_columns

from .fakes import SlowEstimator
from .helpers import get, put, read, start_node


class Clipper:
    """K27 variant: clips a (one-row, broadcast) observation in place."""

    def simulate_batch(self, n, x):
        np.clip(x, 0.0, 1.0, out=x)
        return x


class SeededEstimator(SlowEstimator):
    """Draws from the ``rng`` a sampling call passes (K25)."""

    def sample_posterior(self, n, conditions, rng=None):
        return {"value": rng.standard_normal((n, self.dim)), "log_prob": np.zeros(n)}


def test_k27_an_actor_names_node_input_and_remedy_and_the_block_is_unchanged(track):
    g = (
        Graph()
        .add_node("a", Spec(GaussPrior, {"dim": 2}))
        .add_node("b", Spec(Doubler), parents=["a"])
    )
    handle = start_node(track, g, "b")
    a = np.arange(32.0).reshape(16, 2)
    col = put(a)
    with pytest.raises(InputWriteError) as info:
        read(handle.submit("sample", 16, {"a": col}, [16]))
    msg = str(info.value)
    assert "node 'b'" in msg and "parent 'a'" in msg and "read-only" in msg
    assert "`a = a.copy()`" in msg and isinstance(info.value, SimulatorError)
    np.testing.assert_array_equal(get(col.refs[0]), a)  # the stored block is unchanged

    g = (
        Graph()
        .add_node("x", Spec(GaussPrior, {"dim": 2}))
        .add_node("c", Spec(Clipper), parents=["x"])
    )
    handle = start_node(track, g, "c")
    x_o = np.array([[5.0, -3.0]])
    col = observation_columns(g, {"x": x_o[0]})["x"]
    with pytest.raises(InputWriteError, match=r"node 'c'.*parent 'x'.*`x = x.copy\(\)`"):
        read(handle.submit("sample", 8, {"x": col}, [8]))
    np.testing.assert_array_equal(get(col.refs[0]), x_o)


MAKES = {
    "big-endian": lambda a: a.astype(">f8"),
    "fortran": lambda a: np.asfortranarray(a),
    "reversed": lambda a: np.ascontiguousarray(a[::-1])[::-1],
    "strided": lambda a: np.repeat(a, 2, axis=1)[:, ::2],
}


def test_k28_arrays_enter_native_and_contiguous_at_the_one_door(track):
    g = Graph().add_node("c", Spec(Probe)).add_node("x", Spec(Probe), parents=["c"])
    native = np.array([[7.0, 1.0, 3.0], [2.0, 5.0, 4.0]])
    handle = start_node(track, g, "x")  # one actor for every kind
    for kind, make in MAKES.items():
        obs_col = observation_columns(g, {"c": make(native)[0]})["c"]
        obs = get(obs_col.refs[0])
        assert obs.dtype.isnative and obs.flags.c_contiguous, kind
        np.testing.assert_array_equal(obs, native[:1])
        n, cols = given_columns(g, {"c": make(native), "x": make(native)})
        block = get(cols["c"].refs[0])
        assert n == 2 and block.dtype == np.float64 and block.dtype.isnative, kind
        assert block.flags.c_contiguous, kind
        np.testing.assert_array_equal(block, native)
        # a node reads the converted observation like any other block
        out = read(handle.submit("sample", 4, {"c": obs_col}, [4]))
        assert (out["value"][:, 3] == 7.0).all(), kind
    with pytest.raises(ConfigError, match="node 'c': observation.*numeric"):
        observation_columns(g, {"c": np.array(["a", "b"])})
    with pytest.raises(OutputTypeError, match="node 'c': given values.*numeric"):
        given_columns(g, {"c": np.array([["a"]]), "x": native[:1]})


def test_k25_estimator_draws_follow_the_call_seeds(track):
    g = Graph()
    g.add_node(
        "theta",
        Spec(GaussPrior, {"dim": 2}),
        estimator=Spec(SeededEstimator, {"steps": 0}),
        evidence=["x"],
    )
    g.add_node("x", Spec(GaussPrior, {"dim": 2}))
    handle = start_node(track, g, "theta")
    x = put(np.zeros((1, 2)))

    def sample(seed):
        seeds = np.random.SeedSequence(seed).spawn(2)
        return read(handle.submit("sample_posterior", 8, {"x": x}, [4, 4], seeds))["value"]

    np.testing.assert_array_equal(sample(1), sample(1))
    assert not np.array_equal(sample(1), sample(2))


def test_the_dashboard_is_off_unless_the_config_turns_it_on(monkeypatch):
    import kestrel_ray.cluster._start as init

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    init.init_ray()
    init.init_ray(include_dashboard=True)  # the config's ray section says otherwise
    assert calls[0]["include_dashboard"] is False
    assert calls[1]["include_dashboard"] is True


def test_k44_rays_special_addresses_are_not_refused():
    import subprocess
    import sys

    from kestrel_ray.internal import check_address_format

    for address in ("local", "auto"):
        check_address_format(address, "--address")  # Ray's own words, not host:port
    code = (
        "import ray; from kestrel_ray import init_ray; init_ray('local', num_cpus=1); "
        "print(ray.is_initialized()); ray.shutdown()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
