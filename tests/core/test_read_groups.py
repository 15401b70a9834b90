"""Reading a checkout in groups of blocks (a read larger than Ray's object store, issue 12)."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import StoreError
from kestrel_core.store import BlockRead, Checkout, read_checkout, read_groups


def checkout_of(blocks, rows=None):
    """A checkout reading ``rows[i]`` (default: every row) of each ``{key: array}`` block."""
    reads, start = [], 0
    for i, block in enumerate(blocks):
        n = len(next(iter(block.values())))
        r = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows[i], np.int64)
        reads.append(BlockRead(block, r, np.arange(start, start + len(r), dtype=np.int64)))
        start += len(r)
    ids = np.arange(start, dtype=np.int64)
    return Checkout(token=1, active_ids=ids, new_ids=ids, reads=reads)


def recording(calls):
    def resolve(values):
        calls.append([np.asarray(v).nbytes for v in values])
        return list(values)

    return resolve


def no_empty(key):
    raise AssertionError(f"no empty key expected: {key}")


BLOCKS = [
    {"theta": np.arange(8.0 * k, 8.0 * k + 8).reshape(4, 2), "x": np.full((4, 3), k, np.float32)}
    for k in range(6)
]
SCHEMA = {"theta": ((2,), np.dtype(np.float64)), "x": ((3,), np.dtype(np.float32))}  # 28 B a row


def test_groups_never_ask_for_more_than_the_budget_and_read_the_same_rows():
    whole = read_checkout(checkout_of(BLOCKS), ["theta", "x"], list, no_empty)
    calls: list[list[int]] = []
    grouped = read_checkout(
        checkout_of(BLOCKS),
        ["theta", "x"],
        recording(calls),
        no_empty,
        schema=SCHEMA,
        max_bytes=250,  # two blocks of 112 bytes a group
    )
    assert [len(c) // 2 for c in calls] == [2, 2, 2]
    assert all(sum(c) <= 250 for c in calls)
    for key in ("theta", "x"):
        np.testing.assert_array_equal(grouped[key], whole[key])
        assert grouped[key].dtype == whole[key].dtype and grouped[key].flags.c_contiguous


def test_without_a_budget_every_block_is_asked_for_in_one_call():
    calls: list[list[int]] = []
    read_checkout(checkout_of(BLOCKS), ["theta"], recording(calls), no_empty, schema=SCHEMA)
    assert len(calls) == 1 and len(calls[0]) == len(BLOCKS)


def test_a_block_larger_than_the_budget_is_a_group_of_its_own():
    calls: list[list[int]] = []
    out = read_checkout(
        checkout_of(BLOCKS[:3]), ["x"], recording(calls), no_empty, schema=SCHEMA, max_bytes=1
    )
    assert len(calls) == 3
    np.testing.assert_array_equal(out["x"][:, 0], np.repeat([0, 1, 2], 4).astype(np.float32))


def test_rows_of_part_of_each_block_in_new_ids_order():
    rows = [[3, 0], [], [1], [2, 2], [0], [3]]
    calls: list[list[int]] = []
    out = read_checkout(
        checkout_of(BLOCKS, rows),
        ["theta"],
        recording(calls),
        no_empty,
        schema=SCHEMA,
        max_bytes=40,  # the estimate counts up to the last row read
    )
    expect = np.concatenate([BLOCKS[i]["theta"][r] for i, r in enumerate(rows) if r])
    np.testing.assert_array_equal(out["theta"], expect)
    assert len(calls) > 1


def test_a_wider_dtype_in_a_later_group_widens_the_result_exactly():
    blocks = [{"a": np.array([[1.5], [2.5]], np.float32)}, {"a": np.array([[0.1], [1e300]])}]
    out = read_checkout(
        checkout_of(blocks),
        ["a"],
        list,
        no_empty,
        schema={"a": ((1,), np.dtype(np.float64))},
        max_bytes=8,
    )
    assert out["a"].dtype == np.float64
    np.testing.assert_array_equal(out["a"][:, 0], [1.5, 2.5, 0.1, 1e300])


def test_per_sample_shapes_that_differ_across_groups_are_a_store_error():
    blocks = [{"a": np.zeros((2, 3))}, {"a": np.zeros((2, 4))}]
    with pytest.raises(StoreError, match="'a'.*per-sample shapes"):
        read_checkout(
            checkout_of(blocks),
            ["a"],
            list,
            no_empty,
            schema={"a": ((1,), np.dtype(np.float64))},
            max_bytes=8,
        )


def test_read_groups_are_consecutive_and_cover_every_read():
    reads = checkout_of(BLOCKS).reads
    groups = read_groups(reads, ["theta", "x"], SCHEMA, 300)
    assert [len(g) for g in groups] == [2, 2, 2]
    assert [r for g in groups for r in g] == list(reads)
    assert read_groups(reads, ["theta"], None, 300) == [reads]
