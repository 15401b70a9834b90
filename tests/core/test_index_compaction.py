"""BlockIndex forgets the DELETED ids below its oldest held block: a bounded index for long runs
(issue 11, the soak: the store actor's memory grew 9 bytes per sample ever simulated)."""

from __future__ import annotations

import numpy as np
import pytest

import kestrel_core.store._index as index_module
from kestrel_core import BlockIndex, Status, rotate

LIVE_CODES = [int(Status.VALIDATION), int(Status.TRAINING), int(Status.DISFAVOURED)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_compacting_index_follows_the_oracle(monkeypatch, seed):
    """Random appends, discards, checkouts and releases with compaction after 8 dead ids."""
    monkeypatch.setattr(index_module, "COMPACT_AT", 8)
    rng = np.random.default_rng(seed)
    rules = dict(min_samples=5, max_samples=12, validation_samples=3)
    index, oracle, handles, tokens = BlockIndex(**rules, seed=0), np.zeros(0, np.int8), {}, []
    for step in range(600):
        action = rng.integers(5)
        if action <= 1 or oracle.size == 0:
            n = int(rng.integers(1, 9))
            ids = index.append(f"block{step}", n)
            assert ids.tolist() == list(range(oracle.size, oracle.size + n))  # never reused
            handles.update({int(i): f"block{step}" for i in ids})
            oracle = rotate(np.concatenate([oracle, np.zeros(n, np.int8)]), **rules)
        elif action == 2:
            ids = rng.integers(0, oracle.size, size=3)
            moved = np.unique(ids[oracle[ids] == Status.TRAINING])
            assert index.discard(ids) == moved.size
            oracle[moved] = Status.DISFAVOURED
        elif action == 3 and len(tokens) < 2:
            token, active, new, reads = index.checkout(LIVE_CODES)
            assert active.tolist() == np.flatnonzero(np.isin(oracle, LIVE_CODES)).tolist()
            assert all(handles[int(i)] == h for h, _, ids in reads for i in ids)
            tokens.append(token)
        elif tokens:
            index.release(tokens.pop(0))
        live = np.isin(oracle, LIVE_CODES)
        every = np.arange(oracle.size)
        status = index.status(every)
        assert (status[live] == oracle[live]).all()
        assert np.isin(status[~live], [Status.TOMBSTONE, Status.DELETED]).all()
        assert (index.status_array == status).all()
        stats = index.stats()
        assert (
            stats["total"] == oracle.size
            and sum(stats[s.name.lower()] for s in Status) == oracle.size
        )
        assert (status[: index.first_kept_id] == Status.DELETED).all()
    assert index.first_kept_id > 0  # it did forget


def test_a_long_run_keeps_a_bounded_index():
    index = BlockIndex(min_samples=64, max_samples=128, validation_samples=32)
    for i in range(2000):  # 2000 rounds of 128: 256000 ids
        index.append(f"b{i}", 128)
    assert index.stats()["total"] == 256_000
    assert len(index._status) <= 4 * index_module.COMPACT_AT  # not 256000
    assert index.first_kept_id > 250_000 - 4 * index_module.COMPACT_AT
