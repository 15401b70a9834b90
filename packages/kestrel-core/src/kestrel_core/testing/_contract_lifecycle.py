"""The store contract: ids, statuses and invalid rows."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core._errors import StoreError
from kestrel_core.store import BlockMeta
from kestrel_core.testing._contract_base import (
    DEL,
    KEYS,
    ContractBase,
    D,
    T,
    V,
    X,
    counts,
    rows_for,
)

__all__ = ["LifecycleContract"]


class LifecycleContract(ContractBase):
    """Part of :class:`~kestrel_core.testing.StoreContract`: ids, statuses and invalid rows."""

    # lifecycle -------------------------------------------------------------------------------

    def test_worked_lifecycle_example(self, make_store, make_block):
        store = make_store(min_samples=4, max_samples=6, validation_samples=2)
        self.append(store, make_block, 6)
        assert counts(store) == (2, 4, 0, 0)
        assert store.status(np.arange(6)).tolist() == [T, T, T, T, V, V]
        assert store.discard([0, 1, 2]) == 3
        assert counts(store) == (2, 1, 3, 0)
        self.append(store, make_block, 2)
        assert counts(store) == (2, 3, 1, 2)
        assert store.status([0, 1, 2]).tolist() == [X, X, D]  # the oldest disfavoured die first
        self.append(store, make_block, 2)
        assert counts(store) == (2, 5, 0, 3)
        self.append(store, make_block, 4)
        assert counts(store) == (2, 6, 0, 6)
        assert store.stats()["total"] == 14

    def test_validation_zero_promotes(self, make_store, make_block):
        store = make_store(min_samples=4, max_samples=8, validation_samples=0)
        self.append(store, make_block, 8)
        assert counts(store) == (0, 8, 0, 0)
        assert (store.status(np.arange(8)) == T).all()

    def test_discard_leaves_validation_and_deleted_unchanged(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=2, validation_samples=2)
        self.append(store, make_block, 4)  # ids 0-3: 2 T, 2 V
        self.append(store, make_block, 4)  # ids 0-3 die, block 0 is dropped: DELETED
        before = store.status(np.arange(8))
        assert before.tolist() == [DEL] * 4 + [T, T, V, V]
        assert store.discard([0, 6]) == 0  # a DELETED and a VALIDATION id
        assert store.status(np.arange(8)).tolist() == before.tolist()
        assert store.discard([4, 4, 6]) == 1  # duplicates count once; only TRAINING moves
        assert store.status([4, 6]).tolist() == [D, V]

    def test_oversized_append_warns(self, make_store, make_block):
        store = make_store(min_samples=4, max_samples=8, validation_samples=0)
        with self.warns(r"20 samples appended but max_samples is 8"):
            self.append(store, make_block, 20)
        assert counts(store) == (0, 8, 0, 12)
        assert (store.status(np.arange(12, 20)) == T).all()  # the newest survive

    def test_append_of_buffer_size_does_not_warn(self, make_store, make_block):
        store = make_store(min_samples=4, max_samples=6, validation_samples=2)
        self.append(store, make_block, 8)  # fills validation and training exactly
        assert counts(store) == (2, 6, 0, 0)

    def test_ids_are_consecutive_and_never_reused(self, make_store, make_block):
        store = make_store(min_samples=0, max_samples=4, validation_samples=0)
        seen = []
        for n in (3, 1, 4, 2):
            seen.extend(self.append(store, make_block, n).tolist())
        assert seen == list(range(10))
        assert store.stats()["deleted"] > 0  # blocks were dropped and ids still not reused
        assert self.put(store, make_block, rows_for(np.arange(0)), 0).tolist() == []
        assert self.append(store, make_block, 1).tolist() == [10]

    def test_block_dropped_only_when_all_rows_dead(self, make_store, make_block):
        store = make_store(min_samples=0, max_samples=3, validation_samples=0)
        self.append(store, make_block, 2)  # block 0: ids 0, 1
        self.append(store, make_block, 2)  # id 0 dies; block 0 keeps id 1 alive
        assert store.status([0, 1]).tolist() == [X, T]
        assert store.stats()["blocks"] == 2
        self.append(store, make_block, 2)  # ids 1, 2 die: block 0 dropped, block 1 keeps id 3
        assert store.status(np.arange(6)).tolist() == [DEL, DEL, X, T, T, T]
        assert store.stats()["blocks"] == 2

    def test_invalid_rows_get_ids_but_are_never_read(self, make_store, make_block):
        store = make_store(min_samples=0, max_samples=10, validation_samples=2)
        valid = np.array([True, False, True, True, False, True])
        assert self.append(store, make_block, 6, valid=valid).tolist() == list(range(6))
        assert store.status(np.arange(6)).tolist() == [
            T,
            X,
            T,
            V,
            X,
            V,
        ]  # the newest valid validate
        assert counts(store) == (2, 2, 0, 2)
        co = store.checkout([T, V], list(KEYS))
        try:
            assert co.new_ids.tolist() == [0, 2, 3, 5]
            np.testing.assert_array_equal(
                self.read_all(co, "x.value"), rows_for([0, 2, 3, 5])["x.value"]
            )
        finally:
            store.release(co.token)
        assert self.append(store, make_block, 1).tolist() == [6]  # ids stay consecutive

    def test_a_block_of_invalid_rows_is_dropped_at_once(self, make_store, make_block):
        store = make_store(min_samples=0, max_samples=10, validation_samples=0)
        self.append(store, make_block, 2)
        self.append(store, make_block, 3, valid=np.zeros(3, bool))
        assert store.status(np.arange(5)).tolist() == [T, T, DEL, DEL, DEL]
        assert store.stats()["blocks"] == 1 and store.stats()["total"] == 5

    def test_metadata_must_describe_the_block(self, make_store, make_block):
        store = make_store(min_samples=0, max_samples=10, validation_samples=0)
        arrays = rows_for(np.arange(4))
        meta = BlockMeta.of({k: v for k, v in arrays.items() if k != "x.value"}, 4)
        with pytest.raises(StoreError, match="metadata"):
            store.append(make_block(arrays), meta)
        with pytest.raises(StoreError, match="valid-row mask"):
            store.append(make_block(arrays), BlockMeta.of(arrays, 4, valid=np.ones(3, bool)))
        assert store.stats()["total"] == 0

    # statuses ---------------------------------------------------------------------------------

    def test_status_is_int8_and_unknown_ids_raise(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=1)
        self.append(store, make_block, 3)
        st = store.status(np.array([2, 0]))
        assert st.dtype == np.int8 and st.tolist() == [V, T]
        for bad in ([3], [-1]):
            with pytest.raises(StoreError, match="unknown sample id"):
                store.status(bad)
            with pytest.raises(StoreError, match="unknown sample id"):
                store.discard(bad)
