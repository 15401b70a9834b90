"""``on_error: skip`` on the Ray side: chunks completed, rows marked, counts carried (K34)."""

import numpy as np
import pytest

from kestrel_core import SimulatorError
from kestrel_core.execute._onerror import Attempt
from kestrel_ray import Column, RefTrace
from kestrel_ray.node._chunks import pack_records, skipped_values


def failed(c):
    try:
        raise ValueError("theta[0] > 2")
    except ValueError as err:
        return Attempt(None, np.ones(c, bool), err)


def test_a_chunk_that_raised_throughout_takes_the_shape_of_the_others():
    ok = Attempt(np.ones((3, 2)), np.zeros(3, bool))
    values, error = skipped_values("x", [ok, failed(2)])
    assert values[1].shape == (2, 2) and np.isnan(values[1]).all()
    assert "ValueError: theta[0] > 2" in error[0] and "Traceback (most recent call" in error[1]
    assert "test_on_error.py" in error[0]


def test_a_call_that_raised_throughout_uses_the_last_shape_or_fails():
    values, _ = skipped_values("x", [failed(2)], template=((4,), np.dtype(np.int64)))
    assert values[0].shape == (2, 4) and (values[0] == 0).all()
    with pytest.raises(SimulatorError, match=r"node 'x': the simulator raised on all 2 samples"):
        skipped_values("x", [failed(2)])


def test_pack_records_counts_errors_apart_from_nonfinite():
    value = np.array([[1.0], [np.nan], [np.nan], [2.0]])
    raised = np.array([False, True, False, False])
    *arrays, meta = pack_records("x", ("value",), [{"value": value}], [raised], ("short", "full"))
    assert meta["errors"] == 1 and meta["nonfinite"] == 1
    assert meta["finite"][0].tolist() == [True, False, False, True]
    assert meta["error"] == ("short", "full")
    *_, clean = pack_records("x", ("value",), [{"value": np.ones((2, 1))}])
    assert clean["errors"] == 0 and clean["error"] is None


def test_a_round_in_which_every_sample_raised_is_an_error_naming_the_node():
    meta = {"x.value": ((), "float64")}
    trace = RefTrace(2, {"x.value": Column.whole([("r", 2)])}, meta, {"x": 0})
    trace.finite["x"] = np.zeros(2, bool)
    trace.errors["x"] = 2
    trace.error["x"] = ("ValueError: theta[0] > 2", "full")
    with pytest.raises(SimulatorError, match=r"node 'x': the simulator raised in all 2 samples"):
        trace.check_finite("round")
    trace.errors["x"], trace.finite["x"] = 1, np.array([True, False])
    assert trace.check_finite("round") == {"x": 0}
    assert trace.select(["x.value"]).errors == {"x": 1}
