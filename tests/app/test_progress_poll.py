"""The progress poll asks only what it reads (issue 32 item 3): the estimators' status and the
store's counts, never the simulator replicas (a node with 128 replicas would be 128 calls twice
a second)."""

from __future__ import annotations

from types import SimpleNamespace

from kestrel.controller._reporting import LaunchReporter
from kestrel.controller._states import Phase


class FakeDeployed:
    def __init__(self):
        self.asked: list[list[str] | None] = []

    def status(self, timeout=2.0, *, nodes=None):
        self.asked.append(None if nodes is None else list(nodes))
        out = {m: {"estimator": {"epoch": 4}} for m in nodes or ("theta", "x")}
        out["_store"] = {"training": 10}
        return out


def test_the_progress_poll_asks_the_estimators_and_the_store_only():
    dg = FakeDeployed()
    launcher = SimpleNamespace(
        cfg=SimpleNamespace(graph=SimpleNamespace(latents=["theta"])),
        dg=dg,
        result=SimpleNamespace(epochs={}, simulated=0, nonfinite={}),
        appends=SimpleNamespace(first=None),
        budget=SimpleNamespace(total=None),
        t0=0.0,
        phase=Phase.TRAINING,
    )
    seen = []
    reporter = LaunchReporter(launcher, lambda state, _: seen.append(state))
    reporter.report(force=True)
    assert dg.asked == [["theta"]]  # not 'x' (the simulator and its replicas)
    assert launcher.result.epochs == {"theta": 4}
    assert reporter.stats == {"training": 10}
    assert seen and seen[0].nodes == {"theta": {"epoch": 4}}
