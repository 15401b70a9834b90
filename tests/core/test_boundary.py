"""The simulator boundary: counts, calls, output conversion and checks, finite rows."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kestrel_core import (
    KestrelError,
    ShapeError,
    SimulatorError,
    as_record,
    call_simulator,
    check_count,
    finite_rows,
)
from kestrel_core._errors import CountError, OutputTypeError
from kestrel_core.testing.models import FakeTensor, Noise


class Batch:
    def __init__(self, fn):
        self.fn = fn

    def simulate_batch(self, n, *parents):
        return self.fn(n, *parents)


class Single:
    def __init__(self, fn):
        self.fn = fn

    def simulate(self, *parents):
        return self.fn(*parents)


# -- counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 5, np.int64(5), np.int32(3), np.uint8(2)])
def test_check_count_accepts_integers(n):
    assert check_count(n) == int(n) and type(check_count(n)) is int


@pytest.mark.parametrize(
    ("n", "match"),
    [
        (5.0, r"n must be a non-negative integer, got 5\.0 \(float\)"),
        (-1, r"got -1"),
        (np.int64(-2), r"got -2"),
        (True, r"got True \(bool\)"),
        ("5", r"got '5' \(str\)"),
        (None, r"got None"),
        (np.float64(3.0), r"float64"),
    ],
)
def test_check_count_rejects_the_rest(n, match):
    with pytest.raises(CountError, match=match) as info:
        check_count(n)
    assert isinstance(info.value, (TypeError, ValueError)) and isinstance(info.value, KestrelError)


def test_check_count_names_the_argument():
    with pytest.raises(ValueError, match=r"^num_samples must"):
        check_count(-3, "num_samples")


# -- K11: leading dimension --------------------------------------------------------------------


def test_k11_leading_dimension_checked_on_every_call():
    calls = []

    def fn(n, theta):
        calls.append(n)
        return np.zeros((2,)) if len(calls) > 1 else np.zeros((n,))

    sim = Batch(fn)
    theta = np.zeros((3, 4))
    assert call_simulator("x", sim, 3, [theta]).shape == (3,)
    with pytest.raises(ShapeError) as info:
        call_simulator("x", sim, 3, [theta])
    assert (
        str(info.value)
        == "node 'x': simulate_batch(3, …) returned shape (2,), expected leading dimension 3"
    )


def test_k11_batch_of_one_returning_an_unbatched_sample_is_rejected():
    sim = Batch(lambda n, theta: np.zeros(10))
    with pytest.raises(
        ShapeError,
        match=r"simulate_batch\(1, …\) returned shape \(10,\), expected leading dimension 1",
    ):
        call_simulator("x", sim, 1, [np.zeros((1, 2))])


def test_k11_per_sample_shape_1_10_is_kept():
    sim = Single(lambda theta: np.full((1, 10), theta[0]))
    out = call_simulator("x", sim, 3, [np.arange(3.0)[:, None]])
    assert out.shape == (3, 1, 10)
    np.testing.assert_array_equal(out[:, 0, 0], [0.0, 1.0, 2.0])


# -- K05: unstable per-sample shape -------------------------------------------------------------


def test_k05_per_sample_shape_must_be_stable():
    sim = Single(lambda theta: np.zeros(9 if theta[0] == 5 else 10))
    with pytest.raises(ShapeError) as info:
        call_simulator("x", sim, 8, [np.arange(8.0)[:, None]])
    assert str(info.value) == "node 'x', key 'x.value': sample 5 has shape (9,), expected (10,)"


# -- K12: conversions and bad outputs -----------------------------------------------------------


@pytest.mark.parametrize(
    "output",
    [
        [1.0, 2.0, 3.0],
        FakeTensor([1.0, 2.0, 3.0]),
        {"value": [1.0, 2.0, 3.0]},
        {"value": FakeTensor([1.0, 2.0, 3.0]), "extra": None},
        (1.0, 2.0, 3.0),
    ],
    ids=["list", "tensor", "dict", "dict-tensor", "tuple"],
)
def test_k12_outputs_are_converted_once(output):
    out = call_simulator("x", Batch(lambda n: output), 3)
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 2.0, 3.0]


def test_per_sample_numpy_scalars_are_stacked():
    out = call_simulator("x", Single(lambda theta: np.float32(theta[0]) * 2), 3, [np.ones((3, 1))])
    assert out.shape == (3,) and out.dtype == np.float32


@pytest.mark.parametrize(
    ("output", "match"),
    [
        (None, r"node 'x': simulate_batch\(2, …\) returned NoneType"),
        (
            {"val": [1, 2]},
            r"node 'x': simulate_batch\(2, …\) returned a dict without 'value' \(keys: \['val'\]\)",
        ),
        ("ab", r"returned str"),
        (object(), r"returned builtins\.object"),
        ([[1.0], [2.0, 3.0]], r"numpy cannot convert"),
        (np.array(["a", "b"]), r"dtype <U1; expected a numeric dtype"),
    ],
    ids=["none", "dict-without-value", "str", "object", "ragged", "strings"],
)
def test_k12_bad_outputs_raise_type_errors_naming_node_and_method(output, match):
    with pytest.raises(OutputTypeError, match=match) as info:
        call_simulator("x", Batch(lambda n: output), 2)
    assert isinstance(info.value, TypeError) and isinstance(info.value, SimulatorError)


def test_simulator_without_a_method_is_rejected():
    with pytest.raises(
        OutputTypeError, match=r"node 'x': simulator object has neither simulate_batch"
    ):
        call_simulator("x", object(), 2)


@pytest.mark.parametrize("n", [0, 2.0, -1])
def test_call_simulator_rejects_bad_counts(n):
    with pytest.raises(CountError):
        call_simulator("x", Batch(lambda n: np.zeros(n)), n)


# -- inputs are read-only, outputs independent --------------------------------------------------


def test_user_code_cannot_write_into_parents():
    theta = np.arange(6.0).reshape(3, 2)

    def fn(n, parent):
        with pytest.raises(ValueError, match="read-only"):
            parent[0, 0] = 99.0
        return parent * 2

    out = call_simulator("x", Batch(fn), 3, [theta])
    assert theta[0, 0] == 0.0 and theta.flags.writeable  # the caller's array is untouched
    np.testing.assert_array_equal(out, theta * 2)


def test_broadcast_parent_arrives_as_a_read_only_view():
    seen = {}

    def fn(n, obs):
        seen["shape"], seen["strides"], seen["writeable"] = (
            obs.shape,
            obs.strides,
            obs.flags.writeable,
        )
        return obs.sum(axis=1)

    x_o = np.arange(5.0)[None]
    out = call_simulator("x", Batch(fn), 4, {"obs": x_o})
    assert seen == {"shape": (4, 5), "strides": (0, 8), "writeable": False}
    assert out.tolist() == [10.0] * 4


def test_per_sample_rows_are_read_only():
    def fn(row):
        assert not row.flags.writeable
        return row + 1

    out = call_simulator("x", Single(fn), 2, [np.zeros((2, 3))])
    assert out.tolist() == [[1.0] * 3] * 2


def test_parent_with_wrong_leading_dimension_is_named():
    with pytest.raises(
        ShapeError,
        match=r"node 'x': parent 'mu' has shape \(5, 3\); expected leading dimension 1 \(broadcast\) or 3",
    ):
        call_simulator("x", Batch(lambda n, mu: mu), 3, {"mu": np.zeros((5, 3))})


def test_output_never_aliases_an_input():
    theta = np.arange(6.0).reshape(3, 2)
    out = call_simulator("x", Batch(lambda n, t: t), 3, [theta])  # identity simulator
    assert not np.shares_memory(out, theta) and out.flags.writeable and out.flags.c_contiguous
    view = call_simulator("x", Batch(lambda n, t: t[:, ::-1]), 3, [theta])
    assert not np.shares_memory(view, theta) and view.flags.c_contiguous


def test_output_is_native_endian_and_contiguous():
    out = call_simulator("x", Batch(lambda n: np.ones((n, 4), dtype=">f4")[:, ::2]), 3)
    assert out.dtype.isnative and out.dtype == np.float32 and out.flags.c_contiguous


# -- rng passing --------------------------------------------------------------------------------


class KeywordOnlyRng:
    def simulate(self, *, rng):
        return rng.random(2)


def test_rng_is_passed_when_accepted_and_reproducible():
    mu = np.zeros((4, 3))
    a = call_simulator("x", Noise(sigma=1.0), 4, [mu], rng=np.random.default_rng(5))
    b = call_simulator("x", Noise(sigma=1.0), 4, [mu], rng=np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    c = call_simulator("x", KeywordOnlyRng(), 3, rng=np.random.default_rng(5))
    assert c.shape == (3, 2) and len({tuple(r) for r in c}) == 3


def test_rng_is_not_passed_to_methods_without_it():
    sim = Batch(lambda n: np.zeros(n))
    assert call_simulator("x", sim, 2, rng=np.random.default_rng(0)).tolist() == [0.0, 0.0]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_user_exceptions_pass_through_with_the_node_named():
    def fail(n):
        raise RuntimeError("solver diverged")

    with pytest.raises(RuntimeError, match="solver diverged") as info:
        call_simulator("x", Batch(fail), 2)
    assert info.value.__notes__ == ["(raised by the simulator of node 'x')"]


# -- as_record ----------------------------------------------------------------------------------


def test_as_record_converts_tensors_and_casts_log_prob():
    out = {"value": FakeTensor(np.ones((3, 2), np.float32)), "log_prob": [0.5, 1.0, 1.5], "aux": 1}
    record = as_record("theta", "sample_posterior", out, 3)
    assert set(record) == {"value", "log_prob"}
    assert record["value"].dtype == np.float32 and record["value"].shape == (3, 2)
    assert record["log_prob"].dtype == np.float64 and record["log_prob"].tolist() == [0.5, 1.0, 1.5]


def test_as_record_value_only():
    record = as_record("x", "simulate_batch", FakeTensor(np.zeros((2, 5))), 2, fields=("value",))
    assert list(record) == ["value"] and record["value"].shape == (2, 5)


@pytest.mark.parametrize(
    ("output", "error", "match"),
    [
        (
            None,
            OutputTypeError,
            r"node 'theta': sample_posterior returned NoneType; expected a dict with keys 'value', 'log_prob'",
        ),
        (FakeTensor(np.zeros((3, 2))), OutputTypeError, r"returned FakeTensor"),
        ({"value": np.zeros((3, 2))}, OutputTypeError, r"dict without 'log_prob'"),
        (
            {"value": np.zeros((3, 2)), "log_prob": np.zeros((3, 1))},
            ShapeError,
            r"node 'theta', key 'theta\.log_prob': sample_posterior returned shape \(3, 1\), expected \(3,\)",
        ),
        (
            {"value": np.zeros((2, 2)), "log_prob": np.zeros(3)},
            ShapeError,
            r"key 'theta\.value': sample_posterior returned shape \(2, 2\), expected leading dimension 3",
        ),
    ],
    ids=["none", "bare-tensor", "no-log-prob", "log-prob-2d", "short-value"],
)
def test_as_record_rejects_bad_outputs(output, error, match):
    with pytest.raises(error, match=match):
        as_record("theta", "sample_posterior", output, 3)


# -- finite rows (K09 support) ------------------------------------------------------------------


def test_finite_rows_spans_every_key():
    trace = {
        "theta.value": np.array([[0.1, 0.2], [np.nan, 0.0], [0.3, 0.4], [0.5, 0.6]]),
        "x.value": np.array([[1.0], [2.0], [np.inf], [3.0]], dtype=np.float32),
        "k.value": np.arange(4),
    }
    assert finite_rows(trace).tolist() == [True, False, False, True]
    assert finite_rows({}).shape == (0,)


def test_finite_rows_requires_aligned_keys():
    with pytest.raises(
        ShapeError, match=r"'x\.value' does not line up(.|\n)*theta\.value +\(4, 2\)"
    ):
        finite_rows({"theta.value": np.zeros((4, 2)), "x.value": np.zeros((3,))})


def test_finite_rows_of_an_empty_chunk_and_of_scalar_samples():
    from kestrel_core.execute._boundary import finite_rows

    assert finite_rows({"x": np.zeros((0, 2))}).shape == (0,)
    assert finite_rows({"x": np.array([1.0, np.nan]), "k": np.array([1, 2])}).tolist() == [
        True,
        False,
    ]
