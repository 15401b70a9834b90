"""The driver's copies of the blocks it lent to the store (issue 30 item 7, the soak's driver growth).

Ray keeps an owner's in-process copy of a small task return whose last reference was a
borrower's (the store, which drops a block when it evicts its rows): the soak's driver grew by
8.4 bytes a sample simulated. The store handle sweeps those copies
(:mod:`kestrel_ray.store._lent`); a block still referenced is never touched.
"""

from __future__ import annotations

import time

import numpy as np
import ray

from kestrel_core import BlockMeta, Status
from kestrel_core.testing import KEYS, rows_for
from kestrel_ray.store._handle import StoreHandle
from kestrel_ray.store._lent import LentRefs


@ray.remote(num_cpus=0)
class Rows:
    """Returns one key's rows, as a simulator call returns a block (the caller owns it)."""

    def key(self, start: int, n: int, key: str) -> np.ndarray:
        return rows_for(np.arange(start, start + n))[key]


def _memory_store_entries() -> int:
    return int(ray._private.worker.global_worker.core_worker.get_memory_store_size())


def test_soak_driver_keeps_no_copy_of_the_blocks_the_store_dropped(track):
    store = StoreHandle.start(min_samples=4, max_samples=8, validation_samples=0)
    track(store.actor)
    rows = Rows.remote()
    track(rows)
    store._lent.every = 0.0  # sweep at every append (a launch: every SWEEP_EVERY seconds)
    ray.get(rows.key.remote(0, 1, KEYS[0]))  # the actor is up
    before = _memory_store_entries()
    appends = 60
    for i in range(appends):  # every append of 8 rows evicts the previous block
        block = {k: rows.key.remote(8 * i, 8, k) for k in KEYS}
        store.append(block, BlockMeta.of(rows_for(np.arange(8 * i, 8 * i + 8)), 8))
        del block
    # the store's releases reach the driver asynchronously: sweep until they did
    deadline = time.monotonic() + 60
    while True:
        store._lent.sweep()
        held = store.held_refs()
        grown = _memory_store_entries() - before
        if grown <= held + len(KEYS) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert grown <= held + len(KEYS), (
        f"{grown} entries left in the driver's memory store after {appends} appends of "
        f"{len(KEYS)} blocks; the store holds {held} refs"
    )
    assert store._lent.released >= (appends - 2) * len(KEYS)
    # the block the store still holds reads back whole: nothing referenced was removed
    co = store.checkout([Status.TRAINING], list(KEYS))
    store.release(co.token)
    last = rows_for(np.arange(8 * (appends - 1), 8 * appends))
    for read in co.reads:
        for k in KEYS:
            np.testing.assert_array_equal(ray.get(read.block[k])[read.rows], last[k][read.rows])


def test_a_lent_ref_still_referenced_is_kept_until_released(track):
    rows = Rows.remote()
    track(rows)
    lent = LentRefs(every=0.0)
    kept = rows.key.remote(0, 4, "theta.log_prob")
    lent.lend([kept, "not a ref"])
    assert len(lent) == 1
    assert lent.sweep() == 0 and len(lent) == 1  # the driver still holds it
    np.testing.assert_array_equal(ray.get(kept), np.arange(4) * 0.5)
    del kept
    assert lent.sweep() == 1 and len(lent) == 0 and lent.released == 1
