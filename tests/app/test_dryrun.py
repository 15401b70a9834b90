"""The dry run before Ray starts (K33) and ``on_error`` (K34, the Ray-free half)."""

import numpy as np
import pytest

from kestrel.preflight._dryrun import DRY_RUN_DRAWS, dry_run, expected_keys
from kestrel_core import ConfigError, Graph, GraphError, SimulatorError
from kestrel_core.execute._blame import attached_traceback, user_traceback
from kestrel_core.execute._onerror import simulate_or_skip
from tests.core import blame_models as bm

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["uniform", 0, 2.5], ["uniform", 0, 1]]}


def sir_graph(days=60, obs_days=60, **x):
    return (
        Graph()
        .add_node("theta", PRIOR)
        .add_node(
            "x",
            {"_target_": f"{bm.__name__}.SIR", "days": days},
            parents=["theta"],
            observed=np.zeros(obs_days),
            **x,
        )
    )


def test_k33_a_59_vs_60_simulator_is_blamed_by_node_and_target():
    with pytest.raises(GraphError) as info:
        dry_run(sir_graph(days=59))
    assert str(info.value) == (
        f"node 'x' ({bm.__name__}.SIR) returns (59,) per sample; its observation has (60,)"
    )


def test_a_fitting_graph_passes_with_two_draws():
    assert DRY_RUN_DRAWS == 2
    assert dry_run(sir_graph()) == []


def test_dry_run_false_skips_the_node_and_its_descendants():
    g = sir_graph(days=59, dry_run=False)
    notes = dry_run(g)
    assert notes == ["node 'x': not dry-run (dry_run: false)"]


def test_k05_the_dry_run_fixes_the_runs_key_schema():
    g = sir_graph(days=60).add_node("y", {"_target_": f"{bm.__name__}.Wide"}, parents=["theta"])
    outputs: dict = {}
    dry_run(g, outputs=outputs)
    want = expected_keys(g, outputs)
    assert sorted(want) == ["theta.log_prob", "theta.value", "x.value", "y.value"]
    assert want["x.value"].shape == (60,) and want["x.value"].source == "its observation"
    assert want["x.value"].node == f"node 'x' ({bm.__name__}.SIR)"
    assert want["y.value"].shape == (2,) and want["y.value"].source.startswith("the dry run")
    assert want["theta.log_prob"].shape == () and want["theta.log_prob"].dtype.kind == "f"
    # a node the dry run skips: its observation fixes the shape (not the dtype)
    skipped = sir_graph(days=59, obs_days=60, dry_run=False)
    outputs = {}
    dry_run(skipped, outputs=outputs)
    want = expected_keys(skipped, outputs)
    assert want["x.value"].shape == (60,) and want["x.value"].dtype is None


def test_a_raising_simulator_shows_the_users_file_and_line():
    g = (
        Graph()
        .add_node("theta", PRIOR)
        .add_node("x", {"_target_": f"{bm.__name__}.Fragile", "limit": -1.0}, parents=["theta"])
    )
    with pytest.raises(SimulatorError) as info:
        dry_run(g)
    text = str(info.value)
    assert text.startswith(f"node 'x' ({bm.__name__}.Fragile): the simulator raised ValueError")
    assert "Traceback (user code only):" in text and "blame_models.py" in text
    assert "raise ValueError" in text and "the epidemic does not converge" in text
    assert "kestrel_core" not in text  # the user's frames only
    assert isinstance(info.value.__cause__, ValueError)  # the full traceback, for --debug


def test_on_error_skip_in_the_dry_run_checks_the_rows_that_worked():
    g = (
        Graph()
        .add_node("theta", PRIOR)
        .add_node("x", f"{bm.__name__}.AlwaysFails", parents=["theta"], on_error="skip")
    )
    assert dry_run(g) == ["node 'x': raised on all 2 dry-run draws (on_error: skip); not checked"]


@pytest.mark.parametrize("value", ["ignore", "Skip", 1, None])
def test_on_error_takes_raise_or_skip_only(value):
    with pytest.raises(ConfigError, match=r"graph\.x\.on_error: expected raise \| skip, found"):
        Graph().add_node("x", PRIOR, on_error=value)


def test_on_error_suggests_the_close_value():
    with pytest.raises(ConfigError, match=r"found 'skp' \(did you mean 'skip'\?\)"):
        Graph().add_node("x", PRIOR, on_error="skp")


def test_dry_run_option_must_be_a_bool():
    with pytest.raises(ConfigError, match=r"graph\.x\.dry_run: expected true or false"):
        Graph().add_node("x", PRIOR, dry_run="no")


def test_k34_skip_finds_the_rows_that_raise_one_at_a_time():
    theta = np.array([[0.5, 0.1], [2.5, 0.1], [1.0, 0.2], [3.0, 0.3]])
    seq = np.random.SeedSequence(1)
    out = simulate_or_skip(
        "x",
        bm.Fragile(),
        4,
        {"theta": theta},
        rng=np.random.default_rng(seq),
        seq=seq,
        on_error="skip",
    )
    assert out.raised.tolist() == [False, True, False, True]
    assert np.isnan(out.value[out.raised]).all() and np.isfinite(out.value[~out.raised]).all()
    assert isinstance(out.first, ValueError)
    assert "blame_models.py" in attached_traceback(out.first)


def test_k34_raise_passes_the_exception_with_its_short_traceback():
    theta = np.array([[0.5, 0.1], [2.5, 0.1]])
    seq = np.random.SeedSequence(1)
    with pytest.raises(ValueError) as info:
        simulate_or_skip(
            "x", bm.Fragile(), 2, {"theta": theta}, rng=np.random.default_rng(seq), seq=seq
        )
    short = attached_traceback(info.value)
    assert short.startswith("Traceback (user code only):") and "blame_models.py" in short
    assert "_boundary.py" not in short and "(raised by the simulator of node 'x')" in short


def test_user_traceback_falls_back_to_the_innermost_frame():
    try:
        np.zeros(2).reshape(3)
    except ValueError as err:
        text = user_traceback(err)
    assert "test_dryrun.py" in text and text.rstrip().splitlines()[-1].startswith("ValueError")
