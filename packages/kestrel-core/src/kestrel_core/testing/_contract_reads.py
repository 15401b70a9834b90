"""The store contract: checkout and release."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core._errors import StoreError
from kestrel_core.testing._contract_base import DEL, KEYS, ContractBase, D, T, V, X, rows_for

__all__ = ["ReadContract"]


class ReadContract(ContractBase):
    """Part of :class:`~kestrel_core.testing.StoreContract`: checkout and release."""

    # checkout / release ----------------------------------------------------------------------

    def test_checkout_reads_active_rows(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=2)
        for n in (3, 4, 3):
            self.append(store, make_block, n)
        co = store.checkout([T, D], list(KEYS))
        try:
            assert co.active_ids.tolist() == list(range(8))
            assert co.new_ids.tolist() == list(range(8))
            assert np.concatenate([r.ids for r in co.reads]).tolist() == list(range(8))
            for key in KEYS:
                np.testing.assert_array_equal(self.read_all(co, key), rows_for(co.new_ids)[key])
        finally:
            store.release(co.token)
        val = store.checkout([V], ["x.value"])
        try:
            assert val.new_ids.tolist() == [8, 9]
            np.testing.assert_array_equal(
                self.read_all(val, "x.value"), rows_for([8, 9])["x.value"]
            )
        finally:
            store.release(val.token)

    def test_checkout_held_ids_are_not_read_again(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 4)
        self.append(store, make_block, 4)
        co = store.checkout([T], ["theta.value"], held_ids=np.array([0, 1, 2, 3, 5, 99]))
        try:
            assert co.active_ids.tolist() == list(range(8))
            assert co.new_ids.tolist() == [4, 6, 7]
            assert np.concatenate([r.ids for r in co.reads]).tolist() == [4, 6, 7]
            np.testing.assert_array_equal(
                self.read_all(co, "theta.value"), rows_for([4, 6, 7])["theta.value"]
            )
        finally:
            store.release(co.token)
        co = store.checkout([T], ["theta.value"], held_ids=np.arange(8))
        try:
            assert co.new_ids.tolist() == [] and co.reads == []
        finally:
            store.release(co.token)

    def test_checkout_max_samples_draws_a_subset(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=50, validation_samples=0, seed=3)
        self.append(store, make_block, 50)
        subsets = []
        for _ in range(3):
            co = store.checkout([T], ["theta.log_prob"], max_samples=10)
            store.release(co.token)
            ids = co.active_ids
            assert ids.size == 10 and np.unique(ids).size == 10
            assert (np.diff(ids) > 0).all() and ids.min() >= 0 and ids.max() < 50
            assert co.new_ids.tolist() == ids.tolist()
            subsets.append(tuple(ids))
        assert len(set(subsets)) > 1  # random, not the first ten
        co = store.checkout([T], ["theta.log_prob"], max_samples=100)
        store.release(co.token)
        assert co.active_ids.size == 50

    def test_checkout_unknown_key_lists_schema(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 4)
        with pytest.raises(
            StoreError, match=r"theta\.vlaue.*theta\.log_prob.*theta\.value.*x\.value"
        ):
            store.checkout([T], ["theta.vlaue"])

    def test_checkout_of_dead_status_is_rejected(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 4)
        with pytest.raises(StoreError, match="TOMBSTONE"):
            store.checkout([X], ["x.value"])

    def test_block_released_only_after_every_checkout_ends(self, make_store, make_block):
        store = make_store(min_samples=4, max_samples=8, validation_samples=0)
        self.append(store, make_block, 8)
        first = store.checkout([T], ["x.value"])
        second = store.checkout([T], ["theta.value"], held_ids=np.arange(4))
        assert first.new_ids.tolist() == list(range(8))
        self.append(store, make_block, 8)  # evicts ids 0-7 while both checkouts hold them
        assert (store.status(np.arange(8)) == X).all()
        assert store.stats()["blocks"] == 2
        np.testing.assert_array_equal(
            self.read_all(first, "x.value"), rows_for(np.arange(8))["x.value"]
        )
        fresh = store.checkout([T], ["x.value"])
        store.release(fresh.token)
        assert fresh.active_ids.tolist() == list(range(8, 16))  # never deleted data
        store.release(first.token)
        assert (store.status(np.arange(8)) == X).all()  # still pinned by the second
        np.testing.assert_array_equal(
            self.read_all(second, "theta.value"), rows_for(np.arange(4, 8))["theta.value"]
        )
        store.release(second.token)
        assert (store.status(np.arange(8)) == DEL).all()
        assert store.stats()["blocks"] == 1

    def test_release_twice_or_unknown_token_raises(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 4)
        co = store.checkout([T], ["x.value"])
        store.release(co.token)
        with pytest.raises(StoreError, match="token"):
            store.release(co.token)
        with pytest.raises(StoreError, match="token"):
            store.release(12345)

    def test_empty_store(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        assert store.stats() == {
            "validation": 0,
            "training": 0,
            "disfavoured": 0,
            "tombstone": 0,
            "deleted": 0,
            "total": 0,
            "blocks": 0,
        }
        co = store.checkout([T, D], ["x.value"])
        store.release(co.token)
        assert co.active_ids.size == 0 and co.new_ids.size == 0 and co.reads == []
