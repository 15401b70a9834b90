"""The progress line once the budget is spent (issue 33 item 5): it says so, instead of a
simulation rate that only decays while the estimators train on."""

from __future__ import annotations

import logging

from kestrel.controller._states import Phase
from kestrel.report._progress import LiveProgress, LogProgress, ProgressState, simulation_text

SPENT = {"total": 10000, "used": 10000, "invalid": 3, "left": 0}


def state(simulated: int, rate: float, budget: dict) -> ProgressState:
    return ProgressState(
        612.0,
        Phase.TRAINING,
        nodes={"theta": {"state": "training", "epoch": 40, "max_epochs": 100}},
        buffer={"training": 9000, "validation": 1000},
        simulated=simulated,
        rate=rate,
        budget=budget,
    )


def test_the_log_line_says_the_budget_is_spent_and_shows_no_rate(caplog):
    log = logging.getLogger("test.progress")
    with caplog.at_level(logging.INFO, logger="test.progress"):
        LogProgress(log, every=0.0).update(state(10000, 15.4, SPENT))
    line = caplog.records[0].getMessage()
    assert line.endswith("; 10000 simulated, budget spent (10000/10000)")
    assert "/s" not in line


def test_a_resumed_launch_that_simulates_nothing_says_so_too():
    assert simulation_text(state(0, 0.0, SPENT)) == "0 simulated, budget spent (10000/10000)"


def test_before_the_budget_is_spent_the_rate_and_budget_are_shown():
    budget = {"total": 10000, "used": 812, "invalid": 0, "left": 9188}
    assert simulation_text(state(812, 64.2, budget)) == "812 simulated (64/s) · budget 812/10000"
    assert simulation_text(state(812, 64.2, {})) == "812 simulated (64/s)"  # no budget


def test_the_live_table_caption_says_the_budget_is_spent():
    live = LiveProgress()
    live.update(state(10000, 15.4, SPENT))  # not started: the table is built, nothing drawn
    caption = str(live._live.renderable.caption)
    assert caption.endswith("· 10000 simulated, budget spent (10000/10000)")
    assert "sim/s" not in caption


def test_training_past_max_epochs_for_the_budget_says_so_not_a_count_above_its_total(caplog):
    # issue 31 item 4: training goes on past max_epochs while the budget's rounds come
    past = ProgressState(
        612.0,
        Phase.TRAINING,
        nodes={"theta": {"state": "training", "epoch": 359, "max_epochs": 2}},
        buffer={"training": 9000, "validation": 1000},
        simulated=812,
        rate=15.4,
        budget={"total": 10000, "used": 812, "invalid": 0, "left": 9188},
    )
    log = logging.getLogger("test.progress")
    with caplog.at_level(logging.INFO, logger="test.progress"):
        LogProgress(log, every=0.0).update(past)
    line = caplog.records[1].getMessage()  # the node's line
    assert "training epoch 359 (max_epochs 2, on for the budget)," in line
    assert "359/2" not in line
