"""Arrays entering a run and inputs handed to simulators, in process (K27, K28).

K27: a simulator's inputs are read-only views of stored samples and observations; writing into
one fails naming the node, the input and the remedy (copy it), and nothing stored changes.
K28: every array entering at run time is normalised by one rule (numeric dtype, native byte
order, C-contiguous), so a big-endian, reversed or strided array is the native one.
"""

import numpy as np
import pytest

from kestrel_core import Graph, SimulatorError, Spec, call_simulator, sample_forward
from kestrel_core._errors import InputWriteError
from kestrel_core.graph._inputs import as_input
from kestrel_core.testing import models


class ClipSecond:
    """Clips its second parent in place (``out=``) and adds the first."""

    def simulate_batch(self, n, a, b):
        np.clip(b, 0.0, 1.0, out=b)
        return a + b


class RowWriter:
    """Per-sample ``simulate`` writing into its row."""

    def simulate(self, theta):
        theta[0] = 0.0
        return theta


class Copier:
    """Follows the remedy: copies, then changes its copy."""

    def simulate_batch(self, n, a):
        a = a.copy()
        a[:, 0] *= 2
        return a


class OwnReadOnly:
    """Fails writing into a read-only array of its own (not an input)."""

    def simulate_batch(self, n, a):
        mine = np.zeros(3)
        mine.flags.writeable = False
        mine[0] = 1.0
        return a


def _graph(child, parents=("a",)):
    g = Graph()
    for p in parents:
        g = g.add_node(p, models.Gauss)
    return g.add_node("b", Spec(child), parents=list(parents))


def test_k27_in_place_write_names_node_input_and_remedy():
    with pytest.raises(InputWriteError) as info:
        sample_forward(_graph(models.Doubler), 16, seed=0)
    msg = str(info.value)
    assert "node 'b'" in msg and "parent 'a'" in msg and "read-only" in msg
    assert "`a = a.copy()`" in msg
    # one error, three ways to catch it: Kestrel's simulator errors, and numpy's ValueError
    assert isinstance(info.value, SimulatorError) and isinstance(info.value, ValueError)


def test_k27_the_written_input_is_named_among_several_and_per_sample():
    with pytest.raises(InputWriteError, match=r"node 'b'.*parent 'b2'.*`b = b.copy\(\)`"):
        sample_forward(_graph(ClipSecond, ("a2", "b2")), 8, seed=0)
    with pytest.raises(InputWriteError, match=r"parent 'a'.*`theta = theta.copy\(\)`"):
        sample_forward(_graph(RowWriter), 4, seed=0)


def test_k27_one_row_condition_clipped_in_place_stays_unchanged():
    # the variant: a downstream node clips a one-row (broadcast) observation in place
    obs = np.array([[5.0, -3.0, 0.5]])
    before = obs.copy()
    with pytest.raises(InputWriteError, match=r"node 'b'.*parent 'b2'"):
        sample_forward(_graph(ClipSecond, ("a2", "b2")), 8, conditions={"b2": obs}, seed=0)
    np.testing.assert_array_equal(obs, before)
    theta = np.arange(6.0).reshape(3, 2)
    with pytest.raises(InputWriteError, match="parent 0"):
        call_simulator("b", models.Doubler(), 3, [theta])
    np.testing.assert_array_equal(theta, np.arange(6.0).reshape(3, 2))


def test_k27_the_remedy_works_and_other_read_only_errors_pass_through():
    t = sample_forward(_graph(Copier), 8, seed=0)
    np.testing.assert_array_equal(t["b.value"][:, 0], 2 * t["a.value"][:, 0])
    np.testing.assert_array_equal(t["b.value"][:, 1:], t["a.value"][:, 1:])
    with pytest.raises(ValueError, match="read-only") as info:
        sample_forward(_graph(OwnReadOnly), 4, seed=0)
    assert not isinstance(info.value, InputWriteError)  # not an input: the user's own error


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a.astype(">f8"),  # big-endian
        lambda a: np.ascontiguousarray(a[::-1])[::-1],  # reversed view
        lambda a: np.repeat(a, 2, axis=1)[:, ::2],  # strided slice
        lambda a: np.asfortranarray(a),  # Fortran order
    ],
    ids=["big-endian", "reversed", "strided", "fortran"],
)
def test_k28_run_time_arrays_are_normalised_at_one_place(make):
    native = np.arange(12.0).reshape(3, 4)
    arr = make(native)
    for copy in (True, False):
        out = as_input(arr, copy=copy)
        assert out.dtype == np.float64 and out.dtype.isnative and out.flags.c_contiguous
        np.testing.assert_array_equal(out, native)
    assert not as_input(arr).flags.writeable
    assert as_input(native, copy=False) is native  # nothing to change: no copy
    # the in-process simulation sees the same values as for the native array
    g = Graph().add_node("a", models.Gauss).add_node("m", models.Shift, parents=["a"])
    for conditions in ({"a": arr}, {"a": arr[:1]}):  # N rows, and one row broadcast
        trace = sample_forward(g, 3, conditions=conditions, seed=1)
        assert trace["a.value"].dtype.isnative and trace["m.value"].dtype.isnative
        np.testing.assert_array_equal(
            trace["m.value"], np.broadcast_to(native[: len(conditions["a"])], (3, 4))
        )


def test_k28_non_numeric_arrays_are_refused_naming_them():
    from kestrel_core import ConfigError

    with pytest.raises(ConfigError, match="observation 'x': expected a numeric array"):
        as_input(np.array(["a", "b"]), "observation 'x'")
    with pytest.raises(ConfigError, match="expected a numeric array, found dtype object"):
        as_input(np.array([object()]))
