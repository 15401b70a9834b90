"""The buffer journal on Ray (kestrel.persist._journal): every append the store accepted is
written by the driver and kept (the bank), a new store gets snapshot + journal back with the
same ids, values and statuses; damaged files are skipped naming them; the budget counts the
journal's rows once (issue 11: a killed store or driver loses no row)."""

from __future__ import annotations

import logging
import os

import numpy as np
import ray

from kestrel.controller._budget import Budget, restore_counts, write_budget
from kestrel.persist._journal import JournalWriter, replay_journal
from kestrel_core import BlockMeta
from kestrel_core.store import read_buffer_file
from kestrel_core.testing import KEYS, rows_for
from kestrel_ray.store._handle import StoreHandle
from kestrel_ray.store._snapshot import restore_store, snapshot_store

RULES = {"min_samples": 4, "max_samples": 10, "validation_samples": 3}
LOG = logging.getLogger("test-journal")


def start(track) -> StoreHandle:
    store = StoreHandle.start(**RULES)
    track(store.actor)
    return store


def submit(store: StoreHandle, start: int, sizes, invalid=(), journal=None) -> np.ndarray:
    """Append blocks of ``sizes`` rows in one call (rows encode their ids; ``invalid`` ids are
    appended marked invalid), then hand them to ``journal`` as the launch loop does; returns
    the ids."""
    parts, first = [], start
    for n in sizes:
        arrays = rows_for(np.arange(first, first + n))
        valid = ~np.isin(np.arange(first, first + n), invalid)
        meta = BlockMeta.of(arrays, n, valid=None if valid.all() else valid)
        parts.append(({k: ray.put(v) for k, v in arrays.items()}, meta))
        first += n
    ids = store.appended(store.submit_append(parts)).ids
    if journal is not None:
        journal.write(store, parts, ids)
    return ids


def same_buffer(a, b) -> None:
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.statuses, b.statuses)
    assert a.next_id == b.next_id
    for key in KEYS:
        np.testing.assert_array_equal(a.arrays[key], b.arrays[key])


def test_snapshot_plus_journal_is_the_store_as_it_was(tmp_path, track, caplog):
    journal, snaps = str(tmp_path / "journal"), str(tmp_path / "snapshots")
    old = start(track)
    writer = JournalWriter(journal, LOG)
    submit(old, 0, [4, 4], journal=writer)
    submit(old, 8, [3], invalid=[9], journal=writer)
    old.discard([0])  # a status only the snapshot keeps
    snapshot = snapshot_store(old)
    from kestrel_core.store import write_buffer_file

    write_buffer_file(snaps, snapshot)
    # both files are in the snapshot, and stay: the journal is the run's bank
    assert sorted(os.listdir(journal)) == ["0-7.npz", "8-10.npz"]
    submit(old, 11, [5, 2], invalid=[12], journal=writer)  # after the snapshot: journal only
    submit(old, 18, [6], journal=writer)  # evicts: max_samples 10
    assert sorted(os.listdir(journal)) == ["0-7.npz", "11-17.npz", "18-23.npz", "8-10.npz"]
    assert writer.appends == 4 and writer.rows == 24 and writer.failed == 0
    truth = snapshot_store(old)  # what the store held when it "died"

    (tmp_path / "journal" / "24-30.npz.tmp").write_bytes(b"PK\x03\x04")  # a write cut short
    new = start(track)
    restore_store(new, read_buffer_file(snaps))
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        replayed = replay_journal(new, journal, snapshot.next_id, LOG)
    assert replayed.rows == 13 and replayed.valid == 12 and replayed.next_id == 24
    assert replayed.skipped == [os.path.join(journal, "24-30.npz.tmp")]
    assert "24-30.npz.tmp" in caplog.text and "never finished" in caplog.text
    assert os.path.exists(os.path.join(journal, "24-30.npz.tmp"))  # left on disk
    same_buffer(snapshot_store(new), truth)  # ids, statuses, values: 0 lost
    live = ("validation", "training", "disfavoured", "total")
    assert {k: new.stats()[k] for k in live} == {k: old.stats()[k] for k in live}
    ids = submit(new, 0, [1])
    assert ids.tolist() == [24]  # ids continue after the journal's


def test_a_lost_file_leaves_a_gap_and_the_rows_after_it_keep_their_ids(tmp_path, track, caplog):
    journal = str(tmp_path / "journal")
    old = start(track)
    writer = JournalWriter(journal, LOG)
    for first in (0, 4, 8):
        submit(old, first, [4], journal=writer)
    os.remove(os.path.join(journal, "4-7.npz"))
    new = start(track)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        replayed = replay_journal(new, journal, 0, LOG)
    assert "ids 4…7 are in neither the snapshot nor the journal" in caplog.text
    assert replayed.next_id == 12 and replayed.rows == 8
    got = snapshot_store(new)
    assert got.ids.tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    for key in KEYS:
        np.testing.assert_array_equal(got.arrays[key], rows_for(got.ids)[key])
    assert submit(new, 0, [1]).tolist() == [12]


def test_the_budget_counts_snapshot_and_journal_rows_once(tmp_path):
    class Snap:
        next_id = 100

    class Replay:
        next_id = 130
        invalid_by_id = [(100, 2), (120, 1)]

    folder = str(tmp_path)
    counted = Budget(1000, used=90, invalid=3, ids=100)  # 10 initial samples, 90 simulations
    write_budget(folder, counted)
    budget = Budget(1000)
    assert restore_counts(budget, folder, Snap(), Replay())
    assert (budget.used, budget.invalid, budget.ids) == (120, 6, 130)
    # budget.json older than the snapshot (a checkpoint's buffer.npz was written after it)
    write_budget(folder, Budget(1000, used=70, invalid=1, ids=80))
    budget = Budget(1000)
    restore_counts(budget, folder, Snap(), Replay())
    assert budget.used == 120 and budget.ids == 130
    # no budget.json: every id is a simulation, as before the journal
    os.remove(os.path.join(folder, "budget.json"))
    budget = Budget(1000)
    assert restore_counts(budget, folder, None, Replay())
    assert budget.used == 130
    assert not restore_counts(Budget(1000), folder, None, None)


def test_a_journal_write_that_fails_is_logged_and_the_launch_goes_on(tmp_path, track, caplog):
    old = start(track)
    folder = tmp_path / "journal"
    folder.write_text("a file where the folder should be")  # every write fails (OSError)
    writer = JournalWriter(str(folder), LOG)
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        assert submit(old, 0, [3], journal=writer).tolist() == [0, 1, 2]  # the append succeeds
    assert writer.failed == 1 and writer.appends == 0
    assert "journal: ids 0…2 not written" in caplog.text
