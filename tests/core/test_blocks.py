"""BlockIndex: the pure bookkeeping both stores (in-memory and Ray) are built on."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import BlockIndex, ConfigError, Status, StoreError, rotate

LIVE_CODES = [int(Status.VALIDATION), int(Status.TRAINING), int(Status.DISFAVOURED)]


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
            token, active, new, reads = index.checkout(
                LIVE_CODES, held_ids=rng.integers(0, oracle.size, 4)
            )
            assert active.tolist() == np.flatnonzero(np.isin(oracle, LIVE_CODES)).tolist()
            assert (
                np.concatenate([r[2] for r in reads] or [np.zeros(0, int)]).tolist() == new.tolist()
            )
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


def test_capped_checkout_keeps_held_ids_and_fetches_only_the_rest():
    index = BlockIndex(min_samples=0, max_samples=100, validation_samples=0, seed=1)
    index.append("b0", 50)
    _, first, new, _ = index.checkout([Status.TRAINING], max_samples=20)
    assert len(first) == 20 and new.tolist() == first.tolist()
    index.append("b1", 10)
    _, second, new, _ = index.checkout([Status.TRAINING], max_samples=20, held_ids=first)
    assert second.tolist() == first.tolist() and new.size == 0  # nothing evicted, nothing refetched
    _, third, new, _ = index.checkout([Status.TRAINING], max_samples=25, held_ids=first)
    assert set(first) <= set(third) and len(third) == 25 and len(new) == 5
