"""Pure bookkeeping: chunk grids, columns, trace blocks, and the store's block index."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import ConfigError, Status, StoreError, rotate
from kestrel_ray import Column, RefTrace, chunk_grid
from kestrel_ray._blocks import BlockIndex
from kestrel_ray._refs import split_chunks

LIVE_CODES = [int(Status.VALIDATION), int(Status.TRAINING), int(Status.DISFAVOURED)]


@pytest.mark.parametrize("n", [0, 1, 3, 10, 1024])
@pytest.mark.parametrize("plans", [[(0, 1)], [(100, 1)], [(0, 4)], [(3, 2), (0, 3)], [(7, 1), (5, 4)]])
def test_chunk_grid_refines_every_nodes_cuts(n, plans):
    grid = chunk_grid(n, plans)
    assert sum(grid) == n and all(c > 0 for c in grid)
    cuts = set(np.cumsum([0] + grid).tolist())
    for size, k in plans:
        edges = [int(i * n / k) for i in range(k)] + [n]
        assert set(edges) <= cuts  # every replica slice is a union of grid chunks
        if size:
            assert max(grid, default=0) <= size  # no chunk exceeds any node's chunk size


def test_split_chunks_cuts_at_the_range():
    assert split_chunks([4, 4, 2], 0, 10) == [4, 4, 2]
    assert split_chunks([4, 4, 2], 4, 8) == [4]
    assert split_chunks([4, 4, 2], 3, 9) == [1, 4, 1]


def test_column_slice_and_broadcast():
    col = Column.whole([("a", 3), ("b", 2)])
    assert col.n == 5 and col.refs == ["a", "b"]
    assert col.slice(2, 4).segments == (("a", 2, 3), ("b", 0, 1))
    assert col.slice(0, 0).n == 0
    one = Column.whole([("obs", 1)])
    assert one.is_broadcast(64) and not one.is_broadcast(1) and not col.is_broadcast(5)


def test_trace_blocks_need_shared_whole_blocks():
    meta = {"a.value": ((2,), "float64"), "b.value": ((), "float32")}
    trace = RefTrace(5, {"a.value": Column.whole([("r1", 3), ("r2", 2)]),
                         "b.value": Column.whole([("s1", 3), ("s2", 2)])}, meta)
    assert trace.blocks() == [
        ({"a.value": "r1", "b.value": "s1"}, 3, {"a.value": ((3, 2), "float64"), "b.value": ((3,), "float32")}),
        ({"a.value": "r2", "b.value": "s2"}, 2, {"a.value": ((2, 2), "float64"), "b.value": ((2,), "float32")}),
    ]
    trace.columns["b.value"] = Column.whole([("s", 5)])
    with pytest.raises(StoreError, match="same whole blocks"):
        trace.blocks()
    trace.columns["b.value"] = Column.whole([("s", 6)]).slice(1, 6)
    with pytest.raises(StoreError, match="same whole blocks"):
        trace.blocks()


def test_block_index_follows_rotate_and_releases_dead_blocks():
    """Random appends, discards and checkouts against an oracle that applies ``rotate``."""
    rng = np.random.default_rng(0)
    rules = dict(min_samples=5, max_samples=12, validation_samples=3)
    index, oracle, handles, tokens = BlockIndex(**rules, seed=0), np.zeros(0, np.int8), {}, []
    for step in range(200):
        action = rng.integers(4)
        if action == 0 or oracle.size == 0:
            n = int(rng.integers(1, 6))
            ids = index.append(f"block{step}", n)
            handles.update({int(i): f"block{step}" for i in ids})
            oracle = rotate(np.concatenate([oracle, np.zeros(n, np.int8)]), **rules)
        elif action == 1:
            ids = rng.integers(0, oracle.size, size=3)
            moved = np.unique(ids[oracle[ids] == Status.TRAINING])
            assert index.discard(ids) == moved.size
            oracle[moved] = Status.DISFAVOURED
        elif action == 2:
            token, active, new, reads = index.checkout(LIVE_CODES, held_ids=rng.integers(0, oracle.size, 4))
            assert active.tolist() == np.flatnonzero(np.isin(oracle, LIVE_CODES)).tolist()
            assert np.concatenate([r[2] for r in reads] or [np.zeros(0, int)]).tolist() == new.tolist()
            assert all(handles[int(i)] == h for h, _, ids in reads for i in ids)
            tokens.append(token)
        elif tokens:
            index.release(tokens.pop(int(rng.integers(len(tokens)))))
        status = index.status_array
        live = np.isin(oracle, LIVE_CODES)
        assert (status[live] == oracle[live]).all()  # live statuses follow rotate exactly
        assert np.isin(status[~live], [Status.TOMBSTONE, Status.DELETED]).all()
        kept = {h for h in index.handles()}
        assert {handles[int(i)] for i in np.flatnonzero(live)} <= kept  # live rows keep their block
    for token in tokens:
        index.release(token)
    dead_only = {handles[int(i)] for i in np.flatnonzero(~np.isin(oracle, LIVE_CODES))}
    live_blocks = {handles[int(i)] for i in np.flatnonzero(np.isin(oracle, LIVE_CODES))}
    assert not (set(index.handles()) & (dead_only - live_blocks))  # unpinned dead blocks dropped
    assert index.open_checkouts == 0


def test_block_index_rejects_bad_rules_and_statuses():
    with pytest.raises(ConfigError, match="max_samples"):
        BlockIndex(max_samples=0)
    with pytest.raises(ConfigError, match="min_samples"):
        BlockIndex(min_samples=-1)
    with pytest.raises(StoreError, match="DELETED"):
        BlockIndex().checkout([Status.DELETED])
