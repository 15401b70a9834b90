"""Issue 32 item 3: without determinism the simulator replicas are kept fed during a launch's
start-up. The initial simulation is cut into (at least) two pieces submitted at once, so each
replica has a call queued behind the one it runs, and once every piece is submitted rounds from
the prior queue behind them (no estimator has a proposal yet), so the replicas simulate on while
training starts. The budget is still spent exactly.

The simulator (:class:`tests.integration.models.GatedNoise`) holds every replica's first call
until the test releases it: what the driver submitted meanwhile was submitted while the first
calls ran, whatever the machine's speed (no timing is asserted).
"""

from __future__ import annotations

import json

import pytest

import kestrel_ray
from kestrel import launch

from .test_launch import toy

REPLICAS = 2
INITIAL = 48  # min_samples 40 + validation_samples 8: one piece before (simulate_count 64)
ROUND = 64


@pytest.fixture(scope="module")
def fed(tmp_path_factory, ray_session):
    """One launch whose submissions were recorded: ``(result, run, submits)``; each submit
    ``(rows, methods, first calls ended by then)``."""
    tmp = tmp_path_factory.mktemp("fed")
    calls = tmp / "calls"
    calls.mkdir()
    cfg = toy(
        tmp,
        x="tests.integration.models.GatedNoise",
        min_samples=40,
        validation_samples=8,
        max_samples=512,
        simulate_count=ROUND,
        simulate_interval=0.0,
    )
    cfg["graph"]["x"]["simulator"]["folder"] = str(calls)
    cfg["graph"]["x"]["num_actors"] = REPLICAS
    cfg["graph"]["x"]["dry_run"] = False  # the driver's dry-run call would wait for the release
    cfg["budget"] = {"simulations": INITIAL + 4 * ROUND}
    cfg["sample"] = {"posterior": {"n": 5}}  # no prior draws at the end (they are no simulations)
    submits: list[tuple[int, list[str], int]] = []
    original = kestrel_ray.DeployedGraph.submit

    def recorded(self, n, plan, *args, **kwargs):
        ended = len(list(calls.glob("*-0-done")))
        submits.append((int(n), [method for _, method in plan], ended))
        forward = [s for s in submits if "sample_proposal" not in s[1]]
        if len(forward) >= 4:  # two pieces and two rounds from the prior: let them run
            (calls / "release").touch()
        return original(self, n, plan, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kestrel_ray.DeployedGraph, "submit", recorded)
        result = launch(cfg, tmp / "run", seed=3, progress=False)
    return result, tmp / "run", submits


def test_replicas_get_a_second_call_while_their_first_initial_call_runs(fed):
    result, run, submits = fed
    assert result.status == "completed"
    forward = [s for s in submits if "sample_proposal" not in s[1]]
    # two pieces of the initial simulation and two rounds from the prior, all submitted while
    # every replica's first call was held (none had ended): each replica had calls queued
    assert [rows for rows, _, _ in forward[:4]] == [INITIAL // 2, INITIAL // 2, ROUND, ROUND]
    assert [ended for _, _, ended in forward[:4]] == [0, 0, 0, 0]
    assert all(rows >= REPLICAS for rows, _, _ in forward[:4])  # a call for every replica


def test_the_budget_is_spent_exactly_with_rounds_from_the_prior(fed):
    result, run, submits = fed
    budget = json.loads((run / "status.json").read_text())["budget"]
    assert budget["used"] == budget["total"] == INITIAL + 4 * ROUND
    simulated = [rows for rows, methods, _ in submits if "sample_posterior" not in methods]
    assert sum(simulated) == INITIAL + 4 * ROUND  # nothing drawn beyond the budget
    log = (run / "graph" / "driver" / "output.log").read_text()
    assert "more from the prior before a proposal existed" in log
