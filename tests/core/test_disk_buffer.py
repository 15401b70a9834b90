"""A buffer larger than memory (issue 32 item 2): the journal read back by id range
(kestrel_core.store._disk.JournalReader) and a store whose older blocks live only on disk
(BlockStore.use_disk), read through the same view as an in-memory buffer."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kestrel_core import BlockMeta, StoreError
from kestrel_core.store import (
    TRAINABLE,
    DiskPolicy,
    InMemoryBufferView,
    InMemoryStore,
    JournalReader,
    OnDisk,
    resolve_on_disk,
    write_journal,
)


def rows(first: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(first, first + n)
    return {
        "z.value": np.stack([ids, -ids], axis=1).astype(np.float64),
        "z.log_prob": ids.astype(np.float32),
        "x.value": np.repeat(ids[:, None, None], 3, axis=1).astype(np.int16),
    }


@pytest.fixture
def journal(tmp_path):
    for first, n in [(0, 10), (10, 15), (25, 5)]:  # three appends: files 0-9, 10-24, 25-29
        write_journal(tmp_path, np.arange(first, first + n), rows(first, n))
    return tmp_path


def test_a_range_across_file_boundaries_reads_the_rows_of_its_ids(journal):
    reader = JournalReader(journal)
    got = reader.block("z.value", 5, 22)  # ids 5 … 26: three files
    np.testing.assert_array_equal(got, rows(5, 22)["z.value"])
    one = reader.block("x.value", 12, 6)  # inside one file: a mapped view, not a copy
    np.testing.assert_array_equal(one, rows(12, 6)["x.value"])
    assert not one.flags.writeable
    assert isinstance(one.base, np.memmap) or isinstance(one, np.memmap)


def test_ids_in_any_order_come_back_in_that_order_for_every_key(journal):
    ids = np.array([28, 3, 12, 12, 0, 29])
    got = JournalReader(journal).read(ids, ["z.value", "z.log_prob", "x.value"])
    for key, want in rows(0, 30).items():
        np.testing.assert_array_equal(got[key], want[ids])
        assert got[key].flags.writeable and got[key].dtype == want.dtype


def test_ids_no_file_holds_are_named_with_what_the_files_cover(journal):
    os.remove(journal / "10-24.npz")  # a gap: those ids were never journaled
    reader = JournalReader(journal)
    with pytest.raises(StoreError, match=r"no file holds id 12 \(files cover 0…9, 25…29\)"):
        reader.read([3, 12], ["z.value"])
    with pytest.raises(StoreError, match="no file holds id 30"):  # beyond the last: no wait
        reader.block("z.value", 28, 3)


def test_a_damaged_file_is_named_in_the_error(journal):
    path = journal / "10-24.npz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # cut short (a disk error, a copy interrupted)
    with pytest.raises(StoreError, match=r"10-24\.npz"):
        JournalReader(journal).block("z.value", 12, 2)
    write_journal(journal, np.arange(30, 32), {"other.value": np.zeros((2, 1))})
    with pytest.raises(StoreError, match=r"30-31\.npz: journal file has no key 'z.value'"):
        JournalReader(journal).block("z.value", 30, 2)


def test_resolve_reads_markers_and_passes_every_other_value_through_once(journal):
    calls = []

    def resolve(values):
        calls.append(list(values))
        return [np.asarray(v) * 10 for v in values]

    out = resolve_on_disk([1, OnDisk(str(journal), "z.log_prob", 25, 5), 2], resolve)
    assert calls == [[1, 2]]
    assert out[0] == 10 and out[2] == 20
    np.testing.assert_array_equal(out[1], np.arange(25, 30, dtype=np.float32))


def _run(tmp_path, policy: DiskPolicy | None, reads: int = 6):
    """Append 12 blocks of 8 rows (journaled after each append, as the launch's driver does),
    fetching the training rows after each; returns the fetches and the store."""
    store = InMemoryStore(min_samples=16, max_samples=48, validation_samples=8, seed=3)
    if policy is not None:
        store.use_disk(policy)
    view = InMemoryBufferView(store)
    fetched, held = [], np.zeros(0, np.int64)
    for b in range(12):
        block = rows(8 * b, 8)
        ids = store.append(block, BlockMeta.of(block))
        if policy is not None:
            write_journal(policy.folder, ids, block)
        got = view.fetch(TRAINABLE, sorted(block), max_samples=40, held_ids=held)
        held = np.union1d(held[np.isin(held, got.active_ids)], got.new_ids)
        fetched.append(got)
    return fetched, store


def test_a_store_beyond_its_cache_reads_old_blocks_from_disk_exactly_as_from_memory(tmp_path):
    folder = str(tmp_path / "journal")
    memory, mem_store = _run(tmp_path, None)
    disk, disk_store = _run(tmp_path, DiskPolicy("disk", folder, cache_samples=16))
    for a, b in zip(memory, disk):  # same ids, same rows, same random subsets
        np.testing.assert_array_equal(a.active_ids, b.active_ids)
        np.testing.assert_array_equal(a.new_ids, b.new_ids)
        for key in a.arrays:
            np.testing.assert_array_equal(a.arrays[key], b.arrays[key])
    stats = disk_store.stats()
    assert stats["on_disk"] > 0 and stats["disk_reads"] > 0
    plain = mem_store.stats()
    assert "on_disk" not in plain
    assert {k: stats[k] for k in plain} == plain  # statuses, eviction, ids unchanged
    # a full fetch now reads the live rows of the spilled blocks from the journal
    full = InMemoryBufferView(disk_store).fetch(TRAINABLE, ["z.value"])
    np.testing.assert_array_equal(full.arrays["z.value"], rows(0, 96)["z.value"][full.new_ids])


def test_auto_stays_in_memory_while_the_buffer_fits(tmp_path):
    folder = str(tmp_path / "journal")
    fits = DiskPolicy("auto", folder, store_bytes=10**9, cache_samples=8)
    _, store = _run(tmp_path, fits)
    assert "on_disk" not in store.stats()
    assert DiskPolicy("auto", folder, store_bytes=1000).cache_rows(100, 30) == 16
    assert DiskPolicy("auto", None, store_bytes=1000).cache_rows(100, 30) is None  # no journal
    assert DiskPolicy("memory", folder, store_bytes=1000).cache_rows(100, 30) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_the_index_counts_its_rows_in_memory_through_appends_releases_and_spills(seed):
    """The spill's count of rows in memory follows every append, release and spill (it is kept,
    not summed over the blocks), and a spill asks only about blocks still in memory."""
    from kestrel_core import BlockIndex

    rng = np.random.default_rng(seed)
    index = BlockIndex(min_samples=4, max_samples=40, validation_samples=6, seed=0)
    index.restore("restored", np.arange(0, 5), next_id=5)  # restored: held, never spilled
    journaled, tokens = 0, []
    for step in range(400):
        action = rng.integers(4)
        if action <= 1:
            n = int(rng.integers(1, 7))
            valid = rng.random(n) > 0.2 if rng.random() < 0.3 else None
            index.append(f"block{step}", n, valid)
        elif action == 2 and len(tokens) < 3:
            tokens.append(index.checkout(TRAINABLE)[0])
        elif tokens:
            index.release(tokens.pop(0))
        journaled = max(journaled, index.next_id - int(rng.integers(0, 8)))
        asked = []

        def ready(first, n, asked=asked, journaled=journaled):
            asked.append(first)
            return first + n <= journaled

        blocks = list(index._blocks.values())
        was_on_disk = {b.start for b in blocks if b.on_disk}
        want = sum(b.n for b in blocks if not b.on_disk)
        assert index.memory_rows == want
        keep = int(rng.integers(0, 30))
        moved = index.spill(keep, lambda h, first, n: ("disk", first, n), ready)
        assert index.memory_rows == want - moved
        now = [b for b in blocks if b.on_disk and b.start not in was_on_disk]
        assert moved == sum(b.n for b in now)
        assert moved == 0 or index.memory_rows + now[-1].n > keep  # it stopped at the limit
        assert all(b.handle == ("disk", b.start, b.n) and b.ids is None for b in now)
        assert len(asked) <= len(now) + 1  # only blocks in memory, oldest first
        assert sorted(asked) == asked and not set(asked) & was_on_disk
    assert any(b.on_disk for b in index._blocks.values())
