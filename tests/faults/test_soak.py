"""The 60-second soak (issue 11 item 2): a launch whose store evicts all the time, its memory
read every second; everything plateaus. The 30-minute run: ``python -m tests.faults.soak``
(RELIABILITY.md)."""

from __future__ import annotations

import pytest

from .soak import SOAK_BUFFER, plateau_problems, run_soak

pytestmark = pytest.mark.faults

#: seconds of the CI soak (the launch's timeout: deploying, training, stopping)
SECONDS = 55.0


def test_a_minute_of_continuous_eviction_plateaus(tmp_path, no_leaked_actors):
    report = run_soak(tmp_path, SECONDS, every=1.0, seed=3)
    text = "\n".join(report.lines())

    assert report.status == "timeout", text
    assert not report.errors, report.errors
    assert len(report.readings) >= 15, text  # readings while training
    # the buffer was replaced many times over: the store evicted continuously
    keep = SOAK_BUFFER["max_samples"] + SOAK_BUFFER["validation_samples"]
    assert report.simulated >= 10 * keep, text
    assert max(r.store_blocks for r in report.readings) <= 3, text
    assert {r.actor_rss.keys().__len__() for r in report.readings} == {3}, text  # z, x, store
    assert not plateau_problems(report.readings), (
        text + "\n" + "\n".join(plateau_problems(report.readings))
    )
