"""Issue 32 item 2: ``--reuse`` of a finished run simulates only what the new budget adds.

Run A (budget B, a buffer smaller than B: rows are evicted from the store) keeps every row in
its bank; ``kestrel.launch(CONFIG with budget B + Δ, NEW, reuse=[A])`` starts from A's B rows —
prior and proposal rows, with their ``log_prob`` — counts them in the budget, simulates exactly
Δ (counted from NEW's ``status.json`` and its bank's manifest), trains, and a resume of NEW
neither reuses nor simulates again. A config whose simulator differs is refused by ``kestrel
launch --reuse`` before anything is written, naming the key. One launched A for the module;
epoch-bounded, in-process on the session's Ray.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from kestrel import launch
from kestrel.cli import main
from kestrel.persist._bank import read_bank
from kestrel.rundir._rundir import RunDir
from kestrel_core.store._buffer_file import read_buffer_file

from .test_launch import MODELS, toy

B = 120  # A's budget: 80 initial rows (64 + 16), then rounds of 16
DELTA = 40  # what NEW's budget adds
EPOCHS = 3
KEYS = ["z.value", "z.log_prob", "x.value"]


def config(tmp_path, simulations: int, sigma: float = 0.05) -> dict:
    cfg = toy(
        tmp_path,
        estimator={"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": EPOCHS},
        max_samples=72,  # < B: the store evicts, the bank keeps
        simulate_interval=0.0,
    )
    cfg["graph"]["x"]["simulator"] = {"_target_": f"{MODELS}.Noise", "sigma": sigma}
    cfg["budget"] = {"simulations": simulations}
    return cfg


def status(run) -> dict:
    return json.loads((run / "status.json").read_text())


def bank(run):
    got = read_bank(RunDir(run).journal)
    assert got is not None
    return got


@pytest.fixture(scope="module")
def run_a(tmp_path_factory, ray_session):
    """A finished run with budget B."""
    tmp = tmp_path_factory.mktemp("reuse")
    a = tmp / "A"
    result = launch(config(tmp, B), a, seed=32, progress=False)
    assert result.status == "completed"
    return tmp, a


def test_run_a_keeps_every_row_in_its_bank(run_a):
    _, a = run_a
    assert status(a)["budget"]["used"] == B
    snapshot = read_buffer_file(str(a / "buffer" / "snapshots"))
    assert snapshot is not None and snapshot.next_id == B
    assert snapshot.counts()["training"] < B  # evicted from the store…
    kept = bank(a)
    assert kept.rows == B and kept.valid == B and not kept.unlisted  # …kept in the bank
    assert [c.first for c in kept.chunks] == sorted(c.first for c in kept.chunks)
    origins = {c.origin for c in kept.chunks}
    assert "initial simulation" in origins and origins & {"resimulation", "end-of-budget draws"}
    assert kept.rows_between(0, B)["_ids"].tolist() == list(range(B))


def test_reuse_simulates_only_what_the_new_budget_adds_and_trains(run_a, no_leaked_actors):
    tmp, a = run_a
    new = tmp / "NEW"
    result = launch(config(tmp, B + DELTA), new, seed=3, progress=False, reuse=[a])
    assert result.status == "completed"
    # it trained: past max_epochs while the budget's rounds came (issue 31 item 4)
    assert result.epochs["z"] >= EPOCHS
    budget = status(new)["budget"]
    assert budget["used"] == B + DELTA and budget["left"] == 0  # the reused rows count
    chunks = bank(new).chunks
    reused = [c for c in chunks if c.origin == "reused"]
    simulated = [c for c in chunks if c.origin != "reused"]
    assert sum(c.rows for c in reused) == B
    assert sum(c.rows for c in simulated) == DELTA  # exactly what the budget adds
    assert any(not c.from_prior for c in reused)  # proposal rows reused (with their log_prob)
    sources = [s for c in reused for s in c.sources]
    assert {s["run"] for s in sources} == {str(a)}
    assert sum(s["rows"] for s in sources) == B
    log = (new / "graph" / "driver" / "output.log").read_text()
    assert f"reuse: {B} rows from {a}" in log
    assert "initial simulation: 0 samples from the prior" in log
    # the reused rows are NEW's own now: they read back as A's
    mine, theirs = bank(new).rows_between(0, B, KEYS), bank(a).rows_between(0, B, KEYS)
    for key in KEYS:
        np.testing.assert_array_equal(mine[key], theirs[key])

    # a resume replays NEW's own rows: nothing reused or simulated again
    again = launch(None, new, progress=False, epochs=1, auto_sample=False)
    assert again.status == "completed"
    assert status(new)["budget"]["used"] == B + DELTA
    assert bank(new).rows == B + DELTA
    log = (new / "graph" / "driver" / "output.log").read_text()
    resumed = log.split("continuing with its config.yml")[-1]
    assert "buffer restored" in resumed and "reuse: " not in resumed


def test_a_changed_simulator_is_refused_naming_the_key(run_a, capsys):
    tmp, a = run_a
    path = tmp / "changed.yml"
    path.write_text(yaml.safe_dump(config(tmp, B + DELTA, sigma=0.2)))
    other = tmp / "OTHER"
    status_code = main(["launch", "-c", str(path), "-o", str(other), "--reuse", str(a)])
    err = capsys.readouterr().err.strip()
    assert status_code == 1 and not other.exists()  # nothing written
    assert "\n" not in err and err.startswith("kestrel launch: error: reuse: "), err
    assert "graph.x.simulator.sigma: 0.05 → 0.2" in err
    assert f"launch without --reuse {a}" in err
