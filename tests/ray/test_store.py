"""The Ray store actor: the shared store contract, plus refs, pins and the RayBufferView."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import ray

from kestrel_core import TRAINABLE, ConfigError, Status, StoreError, StoreWarning
from kestrel_ray import RayBufferView, SampleStore
from tests.core.store_contract import KEYS, StoreContract, rows_for

T, X, DEL = Status.TRAINING, Status.TOMBSTONE, Status.DELETED


class RefBlock(dict):
    """``{flat_key: ObjectRef}`` plus the ``(shape, dtype)`` the store needs with it."""

    def __init__(self, arrays):
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        super().__init__({k: ray.put(a) for k, a in arrays.items()})
        self.shapes = {k: (a.shape, a.dtype.name) for k, a in arrays.items()}


def call(method, *args, **kwargs):
    """``ray.get(method.remote(...))``, re-raising the actor's own exception."""
    try:
        return ray.get(method.remote(*args, **kwargs))
    except ray.exceptions.RayTaskError as err:
        raise err.cause from None


class StoreProxy:
    """The store actor behind the synchronous SampleStore protocol."""

    def __init__(self, handle):
        self.handle = handle

    def append(self, block, n):
        ids, notes = call(self.handle.append_blocks, [(dict(block), n, block.shapes)])
        for note in notes:
            warnings.warn(note, StoreWarning, stacklevel=2)
        return ids

    def __getattr__(self, name):
        return lambda *a, **kw: call(getattr(self.handle, name), *a, **kw)


def start_store(track, **kw):
    SampleStore(**kw)  # argument errors here, as create_store does
    return track(ray.remote(SampleStore).options(num_cpus=0).remote(**kw))


class TestRayStore(StoreContract):
    @pytest.fixture
    def make_store(self, track):
        def make(min_samples, max_samples, validation_samples, **kw):
            return StoreProxy(start_store(track, min_samples=min_samples, max_samples=max_samples,
                                          validation_samples=validation_samples, **kw))
        return make

    @pytest.fixture
    def make_block(self):
        return RefBlock

    def read_rows(self, read, key):
        return ray.get(read.block[key])[read.rows]


@pytest.fixture
def store(track):
    return StoreProxy(start_store(track, min_samples=4, max_samples=8, validation_samples=0))


def append(store, start, n):
    return store.append(RefBlock(rows_for(np.arange(start, start + n))), n)


def test_blocks_hold_refs_not_copies(store):
    append(store, 0, 8)
    co = store.checkout([T], list(KEYS))
    store.release(co.token)
    assert len(co.reads) == 1
    assert all(isinstance(ref, ray.ObjectRef) for ref in co.reads[0].block.values())
    assert store.held_refs() == len(KEYS)  # one ref per key per block, not per sample


def test_append_rejects_arrays_in_place_of_refs(store):
    arrays = rows_for(np.arange(4))
    with pytest.raises(StoreError, match="ObjectRef"):
        call(store.handle.append, arrays, 4, {k: (a.shape, a.dtype.name) for k, a in arrays.items()})
    assert store.stats()["total"] == 0


def test_bad_buffer_values_are_config_errors():
    with pytest.raises(ConfigError, match="buffer.max_samples"):
        SampleStore(max_samples=0)
    with pytest.raises(ConfigError, match="snapshot"):
        SampleStore(snapshot_every=3)


def test_block_release_drops_every_ref_after_eviction_and_release(store):
    append(store, 0, 8)  # block 0
    co = store.checkout([T], ["x.value"])
    append(store, 8, 8)  # evicts block 0 while the checkout pins it
    assert (store.status(np.arange(8)) == X).all()
    assert store.stats()["blocks"] == 2 and store.held_refs() == 2 * len(KEYS)
    store.release(co.token)
    assert (store.status(np.arange(8)) == DEL).all()
    assert store.stats()["blocks"] == 1 and store.held_refs() == len(KEYS)
    assert store.open_checkouts() == 0


def test_k18_view_fetch_after_eviction_never_hangs_nor_reads_dead_rows(store):
    view = RayBufferView(store.handle, timeout=30)
    append(store, 0, 8)
    pinned = store.checkout([T], ["x.value"])  # ids 0-7 checked out …
    append(store, 8, 8)  # … then evicted by 8 new appends before the read
    old = np.concatenate([ray.get(r.block["x.value"])[r.rows] for r in pinned.reads])
    np.testing.assert_array_equal(old, rows_for(np.arange(8))["x.value"])  # still the data checked out
    fetch = view.fetch(TRAINABLE, ["x.value"])
    assert fetch.new_ids.tolist() == list(range(8, 16))
    np.testing.assert_array_equal(fetch.arrays["x.value"], rows_for(np.arange(8, 16))["x.value"])
    store.release(pinned.token)
    assert (store.status(np.arange(8)) == DEL).all()


def test_view_fetch_gathers_rows_in_new_ids_order_as_fresh_arrays(store):
    for start, n in ((0, 3), (3, 2), (5, 3)):
        append(store, start, n)
    view = RayBufferView(store.handle)
    fetch = view.fetch(TRAINABLE, list(KEYS), held_ids=np.array([1, 5]))
    assert fetch.new_ids.tolist() == [0, 2, 3, 4, 6, 7]
    for key in KEYS:
        np.testing.assert_array_equal(fetch.arrays[key], rows_for(fetch.new_ids)[key])
        assert fetch.arrays[key].flags.writeable and fetch.arrays[key].flags.c_contiguous
    fetch.arrays["x.value"][:] = -1.0  # K03: the caller's edit never reaches the store
    again = view.fetch(TRAINABLE, ["x.value"])
    np.testing.assert_array_equal(again.arrays["x.value"], rows_for(np.arange(8))["x.value"])
    assert store.open_checkouts() == 0  # every fetch released its checkout


def test_view_empty_fetch_has_the_schema_shape(store):
    append(store, 0, 4)
    fetch = RayBufferView(store.handle).fetch(TRAINABLE, ["theta.value"], held_ids=np.arange(4))
    assert fetch.new_ids.size == 0
    assert fetch.arrays["theta.value"].shape == (0, 2)
    assert fetch.arrays["theta.value"].dtype == np.float64


def test_view_unknown_key_is_a_store_error_and_releases(store):
    append(store, 0, 4)
    with pytest.raises(StoreError, match="unknown key"):
        RayBufferView(store.handle).fetch(TRAINABLE, ["x.vlaue"])
    assert store.open_checkouts() == 0


def test_view_discard_and_stats(store):
    append(store, 0, 8)
    view = RayBufferView(store.handle)
    view.discard([0, 1])
    stats = view.stats()  # ordered after the discard by Ray
    assert stats["disfavoured"] == 2 and stats["training"] == 6


def test_view_is_usable_from_threads(store):
    from concurrent.futures import ThreadPoolExecutor

    append(store, 0, 8)
    view = RayBufferView(store.handle)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: view.fetch(TRAINABLE, ["theta.value"]), range(8)))
    for fetch in results:
        np.testing.assert_array_equal(fetch.arrays["theta.value"], rows_for(np.arange(8))["theta.value"])
    assert store.open_checkouts() == 0
