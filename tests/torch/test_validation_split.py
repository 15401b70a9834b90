"""validation_fraction: a fixed slice of every append validates (a rule on ids and a seed), and
every model is compared on the union of the slices — not on the newest rows alone."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kestrel_core import ConfigError, InMemoryStore, Status
from kestrel_torch import GaussianPosterior
from kestrel_torch.data._split import LIVE, SplitView, validation_mask
from kestrel_torch.estimators._loss import EstimatorLoss

from .estimator_helpers import LinearGaussian, one_thread  # noqa: F401 (fixture)

LG = LinearGaussian.make()
KEYS = ["theta.value", "theta.log_prob", "x.value"]

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_rule_depends_on_the_id_and_the_seed_only() -> None:
    ids = np.arange(200_000)
    mask = validation_mask(ids, 0.1, seed=3)
    assert mask.dtype == bool and abs(mask.mean() - 0.1) < 0.003
    # any order, any batch: the same answer for each id
    perm = np.random.default_rng(0).permutation(ids)
    np.testing.assert_array_equal(validation_mask(perm, 0.1, 3), mask[perm])
    np.testing.assert_array_equal(validation_mask(ids[5000:5100], 0.1, 3), mask[5000:5100])
    # every block of consecutive ids (an append, a round) gives about its share
    assert all(abs(m.mean() - 0.1) < 0.05 for m in np.split(mask, 200))
    # another seed (an ensemble member): an independent split of the same rows
    other = validation_mask(ids, 0.1, seed=4)
    assert abs((mask & other).mean() - 0.01) < 0.002
    # a larger fraction keeps every row a smaller one validated (nested)
    assert np.all(validation_mask(ids, 0.2, 3)[mask])
    assert not validation_mask(ids, 0.0, 3).any() and validation_mask(ids, 1.0, 3).all()
    with pytest.raises(ValueError, match="fraction"):
        validation_mask(ids, 1.5, 3)


def test_split_views_partition_the_live_rows_and_read_each_row_once() -> None:
    store = InMemoryStore(min_samples=0, max_samples=10_000, validation_samples=64)
    store.append(LG.prior_block(500, np.random.default_rng(1)), 500)

    class Counting:
        def __init__(self, view):
            self.view, self.read = view, 0

        def fetch(self, statuses, keys, *, max_samples=0, held_ids=None):
            out = self.view.fetch(statuses, keys, max_samples=max_samples, held_ids=held_ids)
            self.read += len(out.new_ids)
            return out

    inner = Counting(store.view())
    train, val = (SplitView(inner, 0.2, 7, validation=v) for v in (False, True))
    a, b = train.fetch(LIVE, KEYS), val.fetch(LIVE, KEYS)
    assert np.intersect1d(a.new_ids, b.new_ids).size == 0
    np.testing.assert_array_equal(np.union1d(a.new_ids, b.new_ids), np.arange(500))
    np.testing.assert_array_equal(
        b.new_ids, np.flatnonzero(validation_mask(np.arange(500), 0.2, 7))
    )
    assert len(a.arrays["x.value"]) == a.new_ids.size and a.active_ids.size == a.new_ids.size
    assert inner.read == 1000
    # later fetches read only new rows, never the other side's again
    store.append(LG.prior_block(100, np.random.default_rng(2)), 100)
    c = train.fetch(LIVE, KEYS, held_ids=a.new_ids)
    assert inner.read == 1100 and np.all(c.new_ids >= 500)
    assert not validation_mask(c.new_ids, 0.2, 7).any()


def test_bad_fraction_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"validation_fraction=0.9"):
        GaussianPosterior(validation_fraction=0.9)


@pytest.mark.parametrize("fraction", [0.0, 0.25])
def test_every_model_is_compared_on_the_union_of_every_appends_slice(
    monkeypatch: pytest.MonkeyPatch, fraction: float
) -> None:
    scored: list[np.ndarray] = []
    real = EstimatorLoss.evaluate

    def evaluate(self, model, loader):
        scored.append(loader.ids)
        return real(self, model, loader)

    monkeypatch.setattr(EstimatorLoss, "evaluate", evaluate)
    # the store keeps its own 128 newest rows as VALIDATION (the rule of fraction 0)
    store = InMemoryStore(min_samples=0, max_samples=10_000, validation_samples=128)
    store.append(LG.prior_block(1024, np.random.default_rng(5)), 1024)
    est = GaussianPosterior(seed=3, max_epochs=4, validation_fraction=fraction)
    est.setup(LG.context())
    assert est.split_seed == 3

    async def main() -> None:
        training = asyncio.create_task(est.train(store.view()))
        appended = False
        while not training.done():
            if not appended and est.total_epochs == 1:  # a second round of 512 rows
                store.append(LG.prior_block(512, np.random.default_rng(8)), 512)
                appended = True
            await asyncio.sleep(0)
        await training

    asyncio.run(main())
    last = scored[-1]
    if fraction == 0:  # the newest rows only: the second round alone
        assert last.size == 128 and last.min() >= 1024
        return
    # the rule's rows of both rounds, whatever the store's statuses
    np.testing.assert_array_equal(last, np.flatnonzero(validation_mask(np.arange(1536), 0.25, 3)))
    assert (last < 1024).sum() > 200 and (last >= 1024).sum() > 90
    assert int(store.view().stats()["validation"]) == 128  # the store's statuses are unchanged
    # the training rows: every other live row, each once
    assert est.status()["samples_seen"] == 1536 - last.size
    assert Status.VALIDATION in LIVE
