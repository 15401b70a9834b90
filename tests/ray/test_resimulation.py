"""The driver's resimulation rounds in flight: two at a time, collected and appended in order.

A fake deployed graph stands in for the actors: its submitted rounds are ready when the test
says so, so the order of draws, collections and appends is checked without timing.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from kestrel.controller._budget import Budget
from kestrel.controller._rounds import Resimulation
from kestrel_core import BufferConfig


class FakeTrace:
    def __init__(self, n: int) -> None:
        self.n = n

    def valid_rows(self) -> None:
        return None


class FakeSubmitted:
    def __init__(self, n: int, watched: bool = False) -> None:
        self.n, self.watched, self.done, self.collected = n, watched, False, False

    def ready(self) -> bool:
        return self.done

    def waiting(self) -> list[str]:
        return [] if self.done else ["x"]

    def collect(self) -> FakeTrace:
        self.collected = True
        return FakeTrace(self.n)


class FakeGraph:
    def __init__(self, watched: bool = False) -> None:
        self.watched = watched
        self.submitted: list[FakeSubmitted] = []
        self.appended: list[tuple[int, bool]] = []
        self.closed: list[int | None] = []

    def configure_rounds(self, *args: Any, **kwargs: Any) -> None:
        pass

    fixed = 0  # the latest round training fixed (the marked answer)

    def round_ready_refs(self, k: int, *, marked: bool = False) -> dict[str, Any]:
        if marked:
            return {"theta": ray.put(k if self.fixed >= k else 0)}
        return {"theta": ray.put(k)}

    def submit_from_proposal(self, n: int) -> FakeSubmitted:
        self.submitted.append(FakeSubmitted(n, self.watched))
        return self.submitted[-1]

    def round_appended(self, k: int, last: bool = False) -> None:
        self.appended.append((k, last))

    def close_rounds(self, last: int | None = None) -> None:
        self.closed.append(last)


def resimulation(
    dg: FakeGraph, *, total: int | None = None, deterministic: bool = False
) -> tuple[Resimulation, list[int]]:
    buffer = BufferConfig(
        min_samples=10,
        max_samples=1000,
        validation_samples=10,
        simulate_count=64,
        epochs_per_round=0 if not deterministic else 1,
        simulate_interval=0.0,
    )
    appends: list[int] = []

    def append(trace: FakeTrace, what: str) -> Any:
        appends.append(trace.n)
        return ray.put(trace.n)

    resim = Resimulation(
        dg,
        buffer,
        Budget(total=total),
        deterministic=deterministic,
        append=append,
        finish=lambda ref: ray.get(ref),
        stats=lambda: {"training": 0},
        log=logging.getLogger("test"),
    )
    resim.start()
    return resim, appends


def turn(resim: Resimulation) -> None:
    resim.step(training=True, stopping=False)


def test_a_second_round_is_drawn_while_the_first_simulates_and_no_third() -> None:
    dg = FakeGraph()
    resim, appends = resimulation(dg)
    for _ in range(3):
        turn(resim)
    assert [s.n for s in dg.submitted] == [64, 64]  # two in flight, the bound
    assert appends == [] and resim.busy and resim.in_flight == 128
    dg.submitted[1].done = True  # the second finishes first: it waits for the first's append
    turn(resim)
    assert appends == [] and not dg.submitted[1].collected
    dg.submitted[0].done = True
    turn(resim)  # both collected and appended in order; a third round drawn
    assert appends == [64, 64] and [k for k, _ in dg.appended] == [1, 2]
    assert len(dg.submitted) == 3


def test_the_budget_counts_the_rows_in_flight() -> None:
    dg = FakeGraph()
    resim, appends = resimulation(dg, total=100)
    for _ in range(3):
        turn(resim)
    assert [s.n for s in dg.submitted] == [64, 36]
    for s in dg.submitted:
        s.done = True
    resim.drain()
    assert appends == [64, 36] and resim.budget.used == 100
    assert dg.appended == [(1, False), (2, True)] and dg.closed == [2]


def test_deterministic_rounds_and_watched_nodes_go_one_at_a_time() -> None:
    dg = FakeGraph(watched=True)  # a node with a timeout: collected at once, by its hang watch
    resim, appends = resimulation(dg)
    turn(resim)
    assert len(dg.submitted) == 1 and dg.submitted[0].collected and appends == [64]
    dg = FakeGraph()
    resim, appends = resimulation(dg, deterministic=True)
    for _ in range(3):
        turn(resim)
    assert len(dg.submitted) <= 1


def test_a_stop_draws_no_more_rounds_and_appends_those_in_flight() -> None:
    dg = FakeGraph()
    resim, appends = resimulation(dg)
    for _ in range(2):
        turn(resim)
    assert len(dg.submitted) == 2
    resim.step(training=True, stopping=True)
    assert dg.closed == [None] and resim.busy  # closed at once; the rounds still simulate
    dg.submitted[0].done = True
    resim.step(training=False, stopping=True)
    assert appends == [64] and resim.busy
    dg.submitted[1].done = True
    resim.drain()
    assert appends == [64, 64] and not resim.busy and len(dg.submitted) == 2
    assert [k for k, _ in dg.appended] == [1, 2]


def test_a_deterministic_round_fixed_at_the_last_epoch_is_drawn_however_the_polls_fall() -> None:
    # the driver saw training end before it saw round 1 ready: it asks, and draws it
    dg = FakeGraph()
    dg.fixed = 1
    resim, appends = resimulation(dg, deterministic=True)
    assert resim.more_after_training()
    resim.step(training=False, stopping=False)
    assert [s.n for s in dg.submitted] == [64]
    dg.submitted[0].done = True
    resim.drain()
    assert appends == [64] and not resim.more_after_training()
    resim.step(training=False, stopping=False)  # asked once: nothing more
    assert len(dg.submitted) == 1
    # the driver drew round 1 while training ran: after training, nothing more is owed
    dg = FakeGraph()
    dg.fixed = 1
    resim, appends = resimulation(dg, deterministic=True)
    turn(resim)
    dg.submitted[0].done = True
    resim.drain()
    resim.step(training=False, stopping=False)
    assert len(dg.submitted) == 1 and appends == [64] and not resim.more_after_training()
    # training fixed no round that was not drawn: none is drawn, and none is owed
    dg = FakeGraph()
    resim, appends = resimulation(dg, deterministic=True)
    resim.step(training=False, stopping=False)
    assert dg.submitted == [] and not resim.more_after_training()
