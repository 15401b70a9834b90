"""The sample-store contract: one abstract pytest class every store implementation runs.

Subclass :class:`StoreContract` once in a test module (the subclass's name must start with
``Test``) and provide two fixtures:

* ``make_store`` — a factory ``make_store(min_samples, max_samples, validation_samples, **kw)``
  returning an object whose methods are the :class:`kestrel_core.SampleStore` protocol, called
  synchronously. ``kw`` may hold ``snapshot_every``, ``snapshot_dir`` and ``seed``. The
  fixture owns cleanup.
* ``make_block`` — ``make_block(arrays: dict[str, ndarray]) -> block`` turns arrays of shape
  ``(n, *D)`` into what the store's ``append`` takes (the dict itself in memory, ObjectRefs in
  Ray); the contract passes ``BlockMeta.of(arrays, n)`` beside it.

Override :meth:`StoreContract.read_rows` when ``BlockRead.block[key]`` is not array-like, and
:meth:`StoreContract.warns` when the store's warnings are not raised in the calling process.

The contract: ids are assigned consecutively from 0 and never reused; statuses follow
``kestrel_core.rotate`` after every append; rows the metadata marks invalid get ids but are
never readable; one key schema per store; a block's data stays readable until every checkout
holding it is released, and only then are dead rows DELETED; every k-th sample is snapshot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest

from .._errors import StoreError
from .._store import BlockMeta, BlockRead, Checkout, Status

__all__ = ["StoreContract", "KEYS", "rows_for"]

V, T, D, X, DEL = (Status.VALIDATION, Status.TRAINING, Status.DISFAVOURED, Status.TOMBSTONE,
                   Status.DELETED)
#: the flat keys of the blocks the contract appends
KEYS = ("theta.value", "theta.log_prob", "x.value")


def rows_for(ids: np.ndarray) -> dict[str, np.ndarray]:
    """Arrays whose values encode the sample id, so any read can be checked.

    Returns:
        ``{"theta.value": float64 (n, 2), "theta.log_prob": float64 (n,), "x.value":
        float32 (n, 3)}`` for ``ids`` of shape ``(n,)``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    return {
        "theta.value": np.stack([ids, -ids], axis=1).astype(np.float64),
        "theta.log_prob": ids * 0.5,
        "x.value": np.repeat(ids[:, None], 3, axis=1).astype(np.float32),
    }


def counts(store) -> tuple[int, int, int, int]:
    """(validation, training, disfavoured, dead = tombstone + deleted)."""
    s = store.stats()
    return s["validation"], s["training"], s["disfavoured"], s["tombstone"] + s["deleted"]


class StoreContract:
    """Abstract contract; subclasses supply ``make_store`` and ``make_block`` fixtures."""

    @pytest.fixture
    def make_store(self):
        raise NotImplementedError("subclass must provide the make_store fixture")

    @pytest.fixture
    def make_block(self):
        raise NotImplementedError("subclass must provide the make_block fixture")

    def read_rows(self, read: BlockRead, key: str) -> np.ndarray:
        """Rows ``read.rows`` of ``key`` in the block of a checkout."""
        return np.asarray(read.block[key])[read.rows]

    @contextlib.contextmanager
    def warns(self, match: str) -> Iterator[None]:
        """Expect the store to warn with a message matching ``match``."""
        with pytest.warns(UserWarning, match=match):
            yield

    # helpers ---------------------------------------------------------------------------------

    def put(self, store, make_block, arrays, n: int | None = None, valid=None) -> np.ndarray:
        """Append ``arrays`` as one block with the metadata read from them."""
        meta = BlockMeta.of(arrays, n, valid=valid)
        return np.asarray(store.append(make_block(arrays), meta))

    def append(self, store, make_block, n: int, keys=KEYS, valid=None) -> np.ndarray:
        start = store.stats()["total"]
        arrays = {k: v for k, v in rows_for(np.arange(start, start + n)).items() if k in keys}
        return self.put(store, make_block, arrays, n, valid)

    def read_all(self, checkout: Checkout, key: str) -> np.ndarray:
        parts = [self.read_rows(r, key) for r in checkout.reads]
        return np.concatenate(parts) if parts else np.empty((0,))

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
        assert store.status(np.arange(6)).tolist() == [T, X, T, V, X, V]  # the newest valid validate
        assert counts(store) == (2, 2, 0, 2)
        co = store.checkout([T, V], list(KEYS))
        try:
            assert co.new_ids.tolist() == [0, 2, 3, 5]
            np.testing.assert_array_equal(self.read_all(co, "x.value"), rows_for([0, 2, 3, 5])["x.value"])
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
            np.testing.assert_array_equal(self.read_all(val, "x.value"), rows_for([8, 9])["x.value"])
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
            np.testing.assert_array_equal(self.read_all(co, "theta.value"),
                                          rows_for([4, 6, 7])["theta.value"])
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
        with pytest.raises(StoreError, match=r"theta\.vlaue.*theta\.log_prob.*theta\.value.*x\.value"):
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
        np.testing.assert_array_equal(self.read_all(first, "x.value"), rows_for(np.arange(8))["x.value"])
        fresh = store.checkout([T], ["x.value"])
        store.release(fresh.token)
        assert fresh.active_ids.tolist() == list(range(8, 16))  # never deleted data
        store.release(first.token)
        assert (store.status(np.arange(8)) == X).all()  # still pinned by the second
        np.testing.assert_array_equal(self.read_all(second, "theta.value"),
                                      rows_for(np.arange(4, 8))["theta.value"])
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
        assert store.stats() == {"validation": 0, "training": 0, "disfavoured": 0, "tombstone": 0,
                                 "deleted": 0, "total": 0, "blocks": 0}
        co = store.checkout([T, D], ["x.value"])
        store.release(co.token)
        assert co.active_ids.size == 0 and co.new_ids.size == 0 and co.reads == []

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

    # key schema -------------------------------------------------------------------------------

    def test_missing_or_extra_key_rejected_and_nothing_stored(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 4)
        before = store.stats()
        with pytest.raises(StoreError, match=r"missing \['theta\.log_prob'\]"):
            self.append(store, make_block, 4, keys=("theta.value", "x.value"))
        extra = rows_for(np.arange(4, 8))
        extra["mu.value"] = np.zeros((4, 2))
        with pytest.raises(StoreError, match=r"extra \['mu\.value'\]"):
            self.put(store, make_block, extra, 4)
        assert store.stats() == before

    def test_per_sample_shape_mismatch_rejected(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 4)  # theta.log_prob per-sample shape ()
        bad = rows_for(np.arange(4, 8))
        bad["theta.log_prob"] = bad["theta.log_prob"][:, None]  # per-sample (1,)
        with pytest.raises(StoreError, match=r"'theta\.log_prob'.*\(1,\).*\(\)"):
            self.put(store, make_block, bad, 4)
        assert store.stats()["total"] == 4

    def test_dtype_kind_change_rejected(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        self.append(store, make_block, 2)
        bad = rows_for(np.arange(2, 4))
        bad["theta.value"] = bad["theta.value"].astype(np.int64)
        with pytest.raises(StoreError, match=r"'theta\.value'.*int64"):
            self.put(store, make_block, bad, 2)
        ok = rows_for(np.arange(2, 4))
        ok["x.value"] = ok["x.value"].astype(np.float64)  # same kind, other width: allowed
        assert self.put(store, make_block, ok, 2).tolist() == [2, 3]

    def test_leading_dimension_must_equal_n(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        arrays = rows_for(np.arange(4))
        arrays["x.value"] = arrays["x.value"][:3]
        with pytest.raises(StoreError, match=r"'x\.value'.*\(3, 3\).*4"):
            self.put(store, make_block, arrays, 4)
        assert store.stats()["total"] == 0

    # snapshots --------------------------------------------------------------------------------

    def test_snapshot_every_nth_sample_with_a_shared_counter(self, make_store, make_block, tmp_path):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0,
                           snapshot_every=3, snapshot_dir=tmp_path)
        self.append(store, make_block, 2)
        self.append(store, make_block, 5)  # global samples 1..7 → the 3rd and 6th: ids 2, 5
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["000002.npz", "000005.npz"]
        with np.load(tmp_path / "000005.npz") as snap:
            assert sorted(snap.files) == sorted(KEYS)
            for key, arr in rows_for([5]).items():
                np.testing.assert_array_equal(snap[key], arr[0])  # no batch axis

    def test_snapshots_leave_invalid_rows_out(self, make_store, make_block, tmp_path):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0,
                           snapshot_every=2, snapshot_dir=tmp_path)
        self.append(store, make_block, 6, valid=np.array([1, 0, 1, 1, 1, 0], bool))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["000003.npz"]  # ids 1 and 5 invalid

    def test_snapshot_every_zero_saves_nothing(self, make_store, make_block, tmp_path):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0,
                           snapshot_every=0, snapshot_dir=tmp_path)
        self.append(store, make_block, 7)
        assert list(tmp_path.iterdir()) == []
