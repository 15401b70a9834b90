"""kestrel_core.Rounds: the round schedule a training estimator and the driver share (issue 14)."""

from __future__ import annotations

import asyncio

import pytest

from kestrel_core import ConfigError, Rounds


def run(coro):
    return asyncio.run(coro)


def test_rounds_are_due_every_epochs_per_round():
    rounds = Rounds(3)
    assert [rounds.due(e) for e in range(0, 10)] == [
        None,
        None,
        None,
        1,
        None,
        None,
        2,
        None,
        None,
        3,
    ]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_epochs_per_round_must_be_a_positive_integer(bad):
    with pytest.raises((ConfigError, TypeError, ValueError)):
        Rounds(bad)


def test_a_deterministic_driver_waits_for_exactly_the_round_it_asks_for():
    async def scenario():
        rounds = Rounds(1, deterministic=True)
        waiter = asyncio.ensure_future(rounds.wait_ready(1))
        await asyncio.sleep(0.01)
        assert not waiter.done()  # the estimator has not fixed round 1 yet
        rounds.ready(3)  # it is ahead: still round 1 for a deterministic schedule
        return await waiter

    assert run(scenario()) == 1


def test_without_determinism_a_slow_driver_skips_to_the_newest_round():
    async def scenario():
        rounds = Rounds(1)
        rounds.ready(4)
        return await rounds.wait_ready(2)

    assert run(scenario()) == 4


def test_after_training_ended_every_round_is_ready_at_once():
    async def scenario():
        rounds = Rounds(2, deterministic=True)
        rounds.finish()
        return await rounds.wait_ready(7)

    assert run(scenario()) == 7


def test_waiting_for_a_round_ends_when_it_is_appended_or_the_schedule_closes():
    async def scenario():
        rounds = Rounds(1, deterministic=True, open=True)
        waiter = asyncio.ensure_future(rounds.wait_appended(1))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        rounds.appended(1, last=True)  # the last round: closed in the same call
        got = await waiter
        assert got and rounds.closed and not rounds.open
        later = await rounds.wait_appended(2)  # never comes: closed
        return later

    assert run(scenario()) is False


def test_a_stop_ends_the_wait():
    async def scenario():
        return await Rounds(1, deterministic=True).wait_appended(1, stop=lambda: True)

    assert run(scenario()) is False


def test_a_close_that_overtakes_the_last_append_still_waits_for_it():
    """The driver's "appended(k)" and "close(last=k)" may reach the actor in either order."""

    async def scenario():
        rounds = Rounds(1, deterministic=True, open=True)
        waiter = asyncio.ensure_future(rounds.wait_appended(2))
        rounds.close(last=2)
        await asyncio.sleep(0.12)
        assert not waiter.done()  # round 2 is the last, and it is still coming
        rounds.appended(2)
        return await waiter, await rounds.wait_appended(3)

    assert run(scenario()) == (True, False)


def test_epochs_per_round_zero_leaves_pacing_to_the_clock():
    rounds = Rounds(0)
    assert [rounds.due(e) for e in range(5)] == [None] * 5
    assert run(rounds.wait_ready(3)) == 3  # never waits for an epoch
    with pytest.raises(ConfigError, match="cannot be deterministic"):
        Rounds(0, deterministic=True)
