"""`bench:compare`'s smoke: Kestrel (amortised) and sbi run the two-moons task end to end at
1000 simulations, scored with sbi's early-stopping C2ST classifier (the flag's way through the
child processes; the benchmark's classifier is tested in tests/core/test_c2st.py).

The full comparison (10 000 simulations, three tasks, several seeds) takes most of an hour and
is run by hand (`hatch run bench:compare`, figures in RESULTS.md). This file runs first: its
launches start their own local Ray in child processes, before the session's Ray of the other
benchmark files is up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kestrel_bench import compare

SIMULATIONS = 1000
#: the sequential launch (tool ``kestrel``) is left out: test_reference_accuracy runs it on two
#: moons in `hatch test`, and CI time is short
TOOLS = ("kestrel-amortized", "sbi")


def test_each_tool_learns_two_moons_from_1000_simulations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    argv = ["--tasks", "07_two_moons", "--simulations", str(SIMULATIONS), "--samples", "2000"]
    argv += ["--tools", *TOOLS, "--json", str(out), "--c2st", "early-stopping"]
    assert compare.main(argv) == 0
    rows = json.loads(out.read_text())
    assert [r["tool"] for r in rows] == list(TOOLS)
    for row in rows:
        assert row["simulations"] == SIMULATIONS, row
        assert row["epochs"] >= 1 and row["wall_s"] > 0, row
        # a posterior still shaped like the prior scores about 1.0; one crescent about 0.75
        assert 0.45 <= row["c2st"] <= 0.9, row
    table = capsys.readouterr().out
    assert "| 07_two_moons | sbi | 1 | 1000 |" in table


def test_buffer_overrides_spend_the_budget_as_the_examples_do() -> None:
    assert compare.buffer_overrides(10_000, amortized=False) == [
        "budget.simulations=10000",
        "buffer.validation_samples=1000",
        "buffer.max_samples=9000",
        "buffer.simulate_count=100",
        "buffer.min_samples=1000",
    ]
    amortized = compare.buffer_overrides(10_000, amortized=True)
    assert "buffer.min_samples=9000" in amortized
    assert "graph.theta.estimator.amortized=true" in amortized
    with pytest.raises(ValueError, match="--simulations: at least 100 expected, got 99"):
        compare.buffer_overrides(99, amortized=False)
