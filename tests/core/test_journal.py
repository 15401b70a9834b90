"""The buffer journal's file format (kestrel_core.store._journal): write, read back, trim, and
files a killed writer leaves behind (issue 11: a killed store or driver loses no row)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kestrel_core import StoreError
from kestrel_core.store import (
    journal_files,
    read_journal_file,
    trim_journal,
    write_journal,
)


def rows(first: int, n: int) -> dict[str, np.ndarray]:
    ids = np.arange(first, first + n)
    return {
        "z.value": np.stack([ids, -ids], axis=1).astype(np.float64),
        "z.log_prob": ids.astype(np.float32),
        "x.value": np.repeat(ids[:, None, None], 3, axis=1).astype(np.int16),
    }


def test_an_append_is_written_whole_and_read_back_exactly(tmp_path):
    valid = np.array([True, False, True, True, True])
    path = write_journal(tmp_path, np.arange(10, 15), rows(10, 5), valid, sizes=[3, 2])
    assert os.path.basename(path) == "10-14.npz"
    assert sorted(os.listdir(tmp_path)) == ["10-14.npz"]  # no temp file left
    with np.load(path, allow_pickle=False) as data:  # plain npz, no pickle
        assert set(data.files) == {"z.value", "z.log_prob", "x.value", "_ids", "_valid", "_sizes"}
    [file] = journal_files(tmp_path)
    assert (file.first, file.last, file.complete) == (10, 14, True)
    block = read_journal_file(file)
    np.testing.assert_array_equal(block.ids, np.arange(10, 15))
    np.testing.assert_array_equal(block.valid, valid)
    assert block.invalid == 1 and block.n == 5
    for key, value in rows(10, 5).items():
        assert block.arrays[key].dtype == value.dtype
        np.testing.assert_array_equal(block.arrays[key], value)
    # the append's blocks as they were appended: a mask only where a row was invalid
    (first, mask), (second, none) = block.blocks()
    np.testing.assert_array_equal(first["z.log_prob"], [10, 11, 12])
    np.testing.assert_array_equal(mask, [True, False, True])
    np.testing.assert_array_equal(second["x.value"][:, 0, 0], [13, 14])
    assert none is None


def test_bad_appends_are_refused_naming_what_is_wrong(tmp_path):
    with pytest.raises(StoreError, match="contiguous"):
        write_journal(tmp_path, np.array([1, 3]), rows(1, 2))
    with pytest.raises(StoreError, match="'z.value' has shape"):
        write_journal(tmp_path, np.arange(4), rows(0, 3))
    with pytest.raises(StoreError, match="sizes"):
        write_journal(tmp_path, np.arange(3), rows(0, 3), sizes=[1, 1])
    assert os.listdir(tmp_path) == []


def test_files_come_in_id_order_and_a_snapshot_trims_what_it_holds(tmp_path):
    for first, n in ((100, 20), (0, 16), (16, 16), (32, 68)):
        write_journal(tmp_path, np.arange(first, first + n), rows(first, n))
    (tmp_path / "notes.txt").write_text("not the journal's")
    (tmp_path / "20-25.npz.tmp").write_bytes(b"PK")  # a write cut short, covered below
    assert [(f.first, f.last) for f in journal_files(tmp_path)] == [
        (0, 15),
        (16, 31),
        (20, 25),
        (32, 99),
        (100, 119),
    ]
    gone = trim_journal(tmp_path, 32)  # a snapshot whose id count is 32
    assert sorted(os.path.basename(p) for p in gone) == ["0-15.npz", "16-31.npz", "20-25.npz.tmp"]
    assert sorted(os.listdir(tmp_path)) == ["100-119.npz", "32-99.npz", "notes.txt"]
    assert trim_journal(tmp_path, 99) == []  # 32-99 still holds id 99
    assert trim_journal(tmp_path / "none", 10) == []  # no folder: nothing to do


def test_a_killed_or_damaged_write_is_reported_naming_the_file(tmp_path):
    good = write_journal(tmp_path, np.arange(0, 4), rows(0, 4))
    tmp = tmp_path / "4-7.npz.tmp"  # killed before the rename: only the temp file exists
    tmp.write_bytes(Path(good).read_bytes()[:100])
    cut = tmp_path / "8-11.npz"  # truncated (a disk that lost the end)
    write_journal(tmp_path, np.arange(8, 12), rows(8, 4))
    cut.write_bytes(cut.read_bytes()[:-50])
    wrong = tmp_path / "12-15.npz"  # a file whose name does not match its ids
    os.replace(write_journal(tmp_path, np.arange(20, 24), rows(20, 4)), wrong)
    files = journal_files(tmp_path)
    assert [f.complete for f in files] == [True, False, True, True]
    read_journal_file(files[0])
    for file, text in zip(files[1:], ("never finished", "cannot read", "ids are not 12…15")):
        with pytest.raises(StoreError, match=text) as info:
            read_journal_file(file)
        assert file.path in str(info.value)
    assert len(os.listdir(tmp_path)) == 4  # reading touches nothing
