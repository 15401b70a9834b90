"""Every row of a simulation budget reaches training before training ends, whatever max_epochs
(issue 31 item 4): training goes on past max_epochs while the budget's rounds still come, then
trains on the last round's rows for one epoch."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kestrel_core import InMemoryStore, Rounds
from kestrel_torch import GaussianPosterior

from .estimator_helpers import LinearGaussian, one_thread  # noqa: F401 (fixture)

LG = LinearGaussian.make()
INITIAL, ROUND, ROUNDS = 512, 64, 6

pytestmark = pytest.mark.usefixtures("one_thread")


def launch(
    rounds: Rounds, max_epochs: int, **options: int
) -> tuple[GaussianPosterior, InMemoryStore]:
    """A driver beside training: round k (1…ROUNDS) appends ROUND rows once training fixed its
    proposal; the last is marked so, as a launch whose budget it spends does."""
    store = InMemoryStore(min_samples=0, max_samples=10_000, validation_samples=0)
    store.append(LG.prior_block(INITIAL, np.random.default_rng(0)), INITIAL)
    est = GaussianPosterior(seed=0, max_epochs=max_epochs, early_stop_patience=1, **options)
    est.setup(LG.context())

    async def driver() -> None:
        for k in range(1, ROUNDS + 1):
            await rounds.wait_ready(k)
            store.append(LG.prior_block(ROUND, np.random.default_rng(k)), ROUND)
            rounds.appended(k, last=k == ROUNDS)

    async def main() -> None:
        await asyncio.gather(est.train(store.view(), rounds), driver())

    asyncio.run(main())
    return est, store


@pytest.mark.parametrize("deterministic", [True, False])
def test_training_goes_on_past_max_epochs_until_the_budget_was_trained_on(deterministic):
    rounds = Rounds(1, deterministic=deterministic, open=True)
    est, store = launch(rounds, max_epochs=2)
    status = est.status()
    # every row the budget simulated reached the training cache
    assert status["samples_seen"] == INITIAL + ROUNDS * ROUND == store.view().stats()["training"]
    assert status["epoch"] > 2 and status["ended"] == "max_epochs"
    if deterministic:  # round k enters at the end of epoch k + 1; the last trains one epoch
        assert status["epoch"] == ROUNDS + 2


def test_without_a_budget_max_epochs_ends_training():
    rounds = Rounds(1, deterministic=True, open=False)  # no budget: nothing holds training
    est, _ = launch(rounds, max_epochs=2)
    # round 1 entered at the end of epoch 2, the last: training ends there as it always did
    assert est.status()["epoch"] == 2 and est.status()["samples_seen"] == INITIAL + ROUND


@pytest.mark.parametrize("deterministic", [True, False])
def test_early_stopping_waits_for_the_budget_and_its_last_rows_are_trained_on(deterministic):
    # max_epochs out of reach, patience 1: early stopping ends training, but only once the
    # last round came, and not before its rows were in an epoch (no periodic cache sync: the
    # rows of a free schedule enter only when training takes the store in before it ends)
    rounds = Rounds(1, deterministic=deterministic, open=True)
    est, store = launch(rounds, max_epochs=10_000, cache_sync_every=100_000)
    status = est.status()
    assert status["ended"] == "early_stop" and status["epoch"] >= ROUNDS
    assert status["samples_seen"] == INITIAL + ROUNDS * ROUND == store.view().stats()["training"]
