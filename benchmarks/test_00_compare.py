"""`bench:compare`'s smoke: Kestrel (amortised) and sbi run the two-moons task end to end at
1000 simulations on the benchmark's observation 2, scored with sbi's early-stopping C2ST
classifier (the flag's way through the child processes; the benchmark's classifier is tested in
tests/core/test_c2st.py) against the benchmark's own reference samples (sbibm's data files).

The full comparison (five tasks, 10^3 and 10^4 simulations, observations 1-10) takes hours on
2 cores and is run by hand (`hatch run bench:compare`, figures in RESULTS.md). This file runs
first: its launches start their own local Ray in child processes, before the session's Ray of
the other benchmark files is up.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kestrel_bench import compare, sbibm_files, tasks

SIMULATIONS = 1000
#: the sequential launch (tool ``kestrel``) is left out: test_reference_accuracy runs it on two
#: moons in `hatch test`, and CI time is short
TOOLS = ("kestrel-amortized", "sbi")


def test_each_tool_learns_two_moons_from_1000_simulations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    argv = ["--tasks", "two_moons", "--simulations", str(SIMULATIONS), "--samples", "2000"]
    argv += ["--tools", *TOOLS, "--json", str(out), "--c2st", "early-stopping"]
    argv += ["--observations", "2"]
    assert compare.main(argv) == 0
    rows = json.loads(out.read_text())
    assert [r["tool"] for r in rows] == list(TOOLS)
    for row in rows:
        assert row["simulations"] == SIMULATIONS and row["observation"] == 2, row
        assert row["reference"] == "sbibm 1.1.0", row
        assert row["epochs"] >= 1 and row["wall_s"] > 0, row
        # a posterior still shaped like the prior scores about 1.0; one crescent about 0.75
        assert 0.45 <= row["c2st"] <= 0.9, row
    table = capsys.readouterr().out
    assert "| two_moons | sbi | 1 | 1000 | 2 |" in table
    assert "| two_moons | sbi | 1000 | 2 | 1 |" in table  # the means over observations


def test_every_task_simulates_its_benchmark_observation_from_its_reference_posterior() -> None:
    """Each task's simulator, at reference posterior samples of observation 1, makes data whose
    mean is near the benchmark's observation (in units of the data's spread): the simulator,
    the prior's parametrisation and the files of one task belong together."""
    rng = np.random.default_rng(0)
    for name, spec in tasks.TASKS.items():
        model = tasks.load_model(spec)
        simulator = getattr(model, spec.simulator)(**dict(spec.kwargs))
        theta = sbibm_files.reference_samples(name, 1)[:2000]
        assert theta.shape == (2000, spec.dim), name
        x = simulator.simulate_batch(len(theta), theta, rng).reshape(len(theta), -1)
        x_o = sbibm_files.observation(name, 1)
        z = np.abs(x.mean(0) - x_o) / (x.std(0) + 1e-9)
        assert z.max() < 2.0, (name, z)


def test_the_benchmark_files_are_named_in_their_errors() -> None:
    with pytest.raises(ValueError, match="observation 11: the benchmark has observations 1-10"):
        sbibm_files.observation("two_moons", 11)
    with pytest.raises(sbibm_files.SbibmMissing, match="task 'moons', observation 1"):
        sbibm_files.observation("moons", 1)
    with pytest.raises(KeyError, match="task 'moons': expected one of gaussian_linear"):
        tasks.task("moons")
    assert tasks.task("07_two_moons") is tasks.TASKS["two_moons"]


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
