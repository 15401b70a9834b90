"""The store contract: the key schema and snapshots."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core._errors import StoreError
from kestrel_core.store import BlockMeta, Expected
from kestrel_core.testing._contract_base import KEYS, ContractBase, rows_for

__all__ = ["SchemaContract"]


class SchemaContract(ContractBase):
    """Part of :class:`~kestrel_core.testing.StoreContract`: the key schema and snapshots."""

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

    # the run's key schema, fixed before the first block (expect) --------------------------------

    def test_shape_change_between_blocks_refused(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        store.expect({"x.value": Expected((3,), None, "node 'x' (model.Wide)", "its observation")})
        wide = rows_for(np.arange(4))
        wide["x.value"] = np.concatenate([wide["x.value"], wide["x.value"][:, :1]], axis=1)
        message = (
            r"node 'x' \(model\.Wide\), key 'x\.value': a block of 4 new rows has per-sample "
            r"shape \(4,\), expected \(3,\) \(fixed by its observation\); nothing of it"
        )
        with pytest.raises(StoreError, match=message):  # the very first block: refused
            self.put(store, make_block, wide, 4)
        assert store.stats()["total"] == 0
        self.append(store, make_block, 4)  # the right shape: stored
        with pytest.raises(StoreError, match=message):  # and a later block of the other shape
            self.put(store, make_block, wide, 4)
        assert store.stats()["total"] == 4
        with pytest.raises(StoreError, match=r"'x\.value'.*expected \(2,\).*dry run"):
            store.expect({"x.value": Expected((2,), None, "node 'x'", "the dry run")})

    def test_restored_buffer_checked_against_schema(self, make_store, make_block):
        store = make_store(min_samples=2, max_samples=10, validation_samples=0)
        kind = Expected((), np.dtype(np.float64), "node 'theta' (Prior)", "the dry run")
        store.expect(
            {
                "x.value": Expected((4,), None, "node 'x' (model.F32)", "its observation"),
                "theta.log_prob": kind,
            }
        )
        arrays = rows_for(np.arange(4))  # x.value (3,): saved by an older simulator
        block, meta = make_block(arrays), BlockMeta.of(arrays, 4)
        with pytest.raises(
            StoreError,
            match=r"node 'x' \(model\.F32\), key 'x\.value': the block of 4 restored rows has "
            r"per-sample shape \(3,\), expected \(4,\) \(fixed by its observation\)",
        ):
            store.restore(block, meta, np.arange(4), None, next_id=4)
        assert store.stats()["total"] == 0
        arrays["x.value"] = np.zeros((4, 4), np.float32)
        arrays["theta.log_prob"] = np.arange(4)  # an integer kind where floats are expected
        with pytest.raises(StoreError, match=r"'theta\.log_prob'.*dtype int64.*float64"):
            store.restore(make_block(arrays), BlockMeta.of(arrays, 4), np.arange(4), None)
        arrays["theta.log_prob"] = np.zeros(4, np.float32)  # same kind: fine
        assert store.restore(make_block(arrays), BlockMeta.of(arrays, 4), np.arange(4), None) == 4

    # snapshots --------------------------------------------------------------------------------

    def test_snapshot_every_nth_sample_with_a_shared_counter(
        self, make_store, make_block, tmp_path
    ):
        store = make_store(
            min_samples=2,
            max_samples=10,
            validation_samples=0,
            snapshot_every=3,
            snapshot_dir=tmp_path,
        )
        self.append(store, make_block, 2)
        self.append(store, make_block, 5)  # global samples 1..7 → the 3rd and 6th: ids 2, 5
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["000002.npz", "000005.npz"]
        with np.load(tmp_path / "000005.npz", allow_pickle=False) as snap:
            assert sorted(snap.files) == sorted(KEYS)
            for key, arr in rows_for([5]).items():
                np.testing.assert_array_equal(snap[key], arr[0])  # no batch axis

    def test_snapshots_leave_invalid_rows_out(self, make_store, make_block, tmp_path):
        store = make_store(
            min_samples=2,
            max_samples=10,
            validation_samples=0,
            snapshot_every=2,
            snapshot_dir=tmp_path,
        )
        self.append(store, make_block, 6, valid=np.array([1, 0, 1, 1, 1, 0], bool))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["000003.npz"]  # ids 1 and 5 invalid

    def test_snapshot_every_zero_saves_nothing(self, make_store, make_block, tmp_path):
        store = make_store(
            min_samples=2,
            max_samples=10,
            validation_samples=0,
            snapshot_every=0,
            snapshot_dir=tmp_path,
        )
        self.append(store, make_block, 7)
        assert list(tmp_path.iterdir()) == []
