"""The whole-buffer snapshot a resumed run restores (K31): ids, statuses and data come back."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import BlockMeta, InMemoryStore, Status, StoreError
from kestrel_core.store import (
    BUFFER_FILE,
    read_buffer_file,
    take_snapshot,
    write_buffer_file,
)
from kestrel_core.testing import KEYS, rows_for

RULES = {"min_samples": 12, "max_samples": 10, "validation_samples": 3}  # 2 disfavoured live
LIVE = [int(Status.VALIDATION), int(Status.TRAINING), int(Status.DISFAVOURED)]


def used_store(**kw) -> InMemoryStore:
    """A store after a few rounds: rotated rows, invalid rows, a discarded row."""
    store = InMemoryStore(**RULES, **kw)
    start = 0
    for n, bad in ((8, []), (5, [1, 3]), (6, [0])):
        ids = np.arange(start, start + n)
        valid = np.ones(n, bool)
        valid[bad] = False
        store.append(rows_for(ids), BlockMeta.of(rows_for(ids), n, valid=valid))
        start += n
    store.discard(ids_in(store, Status.TRAINING)[:1])
    return store


def ids_in(store: InMemoryStore, status: Status) -> np.ndarray:
    return store.view().fetch([int(status)], KEYS).new_ids


def live(store: InMemoryStore) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    got = store.view().fetch(LIVE, KEYS)
    return got.new_ids, store.status(got.new_ids), got.arrays


def restored(snapshot) -> InMemoryStore:
    store = InMemoryStore(**RULES)
    meta = BlockMeta.of(snapshot.arrays, snapshot.n)
    store.restore(snapshot.arrays, meta, snapshot.ids, snapshot.statuses, next_id=snapshot.next_id)
    return store


def test_k31_buffer_file_round_trip_keeps_ids_statuses_and_rows(tmp_path):
    store = used_store()
    ids, statuses, arrays = live(store)
    assert Status.DISFAVOURED in statuses and len(ids) < store.stats()["total"]

    path = write_buffer_file(tmp_path, take_snapshot(store, KEYS))
    assert path.endswith(BUFFER_FILE)
    snapshot = read_buffer_file(tmp_path)
    assert snapshot is not None and snapshot.source == path
    again = restored(snapshot)

    ids2, statuses2, arrays2 = live(again)
    np.testing.assert_array_equal(ids2, ids)
    np.testing.assert_array_equal(statuses2, statuses)  # the validation set is the same
    for key in KEYS:
        np.testing.assert_array_equal(arrays2[key], arrays[key])
        np.testing.assert_array_equal(arrays2[key], rows_for(ids)[key])  # rows match their ids
    assert again.stats() | {"tombstone": 0, "deleted": 0} == store.stats() | {
        "tombstone": 0,
        "deleted": 0,
        "blocks": 1,
    }
    # ids are never reused: the next append continues after the old store's last id
    new = again.append(rows_for(np.arange(2)), 2)
    assert new.tolist() == [store.stats()["total"], store.stats()["total"] + 1]


def test_k31_restored_rows_follow_the_rules_afterwards(tmp_path):
    snapshot = take_snapshot(used_store(), KEYS)
    store = restored(snapshot)
    validation = snapshot.ids_with(Status.VALIDATION)
    np.testing.assert_array_equal(ids_in(store, Status.VALIDATION), validation)
    nxt = snapshot.next_id
    store.append(rows_for(np.arange(nxt, nxt + 3)), 3)  # a new round takes the validation places
    assert ids_in(store, Status.VALIDATION).tolist() == [nxt, nxt + 1, nxt + 2]
    assert set(validation.tolist()) <= set(ids_in(store, Status.TRAINING).tolist())


def test_k31_per_sample_snapshots_are_the_fallback(tmp_path):
    store = InMemoryStore(**RULES, snapshot_every=2, snapshot_dir=tmp_path)
    store.append(rows_for(np.arange(12)), 12)
    snapshot = read_buffer_file(tmp_path)
    assert snapshot is not None and snapshot.statuses is None
    assert snapshot.ids.tolist() == [1, 3, 5, 7, 9, 11] and snapshot.next_id == 12
    again = restored(snapshot)  # rows enter as new: the newest 3 validate
    assert ids_in(again, Status.VALIDATION).tolist() == [7, 9, 11]
    for key in KEYS:
        np.testing.assert_array_equal(snapshot.arrays[key], rows_for(snapshot.ids)[key])


def test_no_snapshot_is_none_and_bad_ones_are_named(tmp_path):
    assert read_buffer_file(tmp_path / "missing") is None
    assert read_buffer_file(tmp_path) is None
    (tmp_path / BUFFER_FILE).write_bytes(b"not a zip")
    with pytest.raises(StoreError, match="cannot read buffer snapshot"):
        read_buffer_file(tmp_path)
    np.savez(tmp_path / BUFFER_FILE, **{"theta.value": np.zeros(2)})
    with pytest.raises(StoreError, match="not a buffer snapshot"):
        read_buffer_file(tmp_path)


def test_restore_rejects_ids_already_assigned_and_unreadable_statuses():
    store = InMemoryStore(**RULES)
    store.append(rows_for(np.arange(4)), 4)
    rows = rows_for(np.arange(2))
    with pytest.raises(StoreError, match="strictly ascending and ≥ 4"):
        store.restore(rows, BlockMeta.of(rows, 2), np.array([3, 5]))
    with pytest.raises(StoreError, match="not readable"):
        store.restore(rows, BlockMeta.of(rows, 2), np.array([5, 6]), np.array([1, 3]))
    with pytest.raises(StoreError, match="2 ids for a block of 2 rows|3 ids"):
        store.restore(rows, BlockMeta.of(rows, 2), np.array([5, 6, 7]))
    assert store.stats()["total"] == 4  # nothing was stored
