"""The Ray store actor: the shared store contract, plus refs, pins and the RayBufferView."""

from __future__ import annotations

import numpy as np
import pytest
import ray

from kestrel_core import TRAINABLE, BlockMeta, ConfigError, Status, StoreError
from kestrel_core.testing import KEYS, StoreContract, rows_for
from kestrel_ray import RayBufferView, SampleStore
from kestrel_ray.store._handle import StoreHandle
from tests.core.store_cases import with_case_ids

T, X, DEL = Status.TRAINING, Status.TOMBSTONE, Status.DELETED


def ref_block(arrays):
    """``{flat_key: ObjectRef}`` of the arrays, put by the driver (which owns them)."""
    return {k: ray.put(np.asarray(v)) for k, v in arrays.items()}


def start_store(track, **kw) -> StoreHandle:
    store = StoreHandle.start(**kw)
    track(store.actor)
    return store


@with_case_ids
class TestRayStore(StoreContract):
    """The contract on the actor, through the StoreHandle every caller uses."""

    @pytest.fixture
    def make_store(self, track):
        def make(min_samples, max_samples, validation_samples, **kw):
            return start_store(
                track,
                min_samples=min_samples,
                max_samples=max_samples,
                validation_samples=validation_samples,
                **kw,
            )

        return make

    @pytest.fixture
    def make_block(self):
        return ref_block

    def read_rows(self, read, key):
        return ray.get(read.block[key])[read.rows]


@pytest.fixture
def store(track):
    return start_store(track, min_samples=4, max_samples=8, validation_samples=0)


def append(store, start, n):
    arrays = rows_for(np.arange(start, start + n))
    return store.append(ref_block(arrays), BlockMeta.of(arrays, n))


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
        store.append(arrays, BlockMeta.of(arrays, 4))
    assert store.stats()["total"] == 0


def test_appends_in_flight_and_batched_are_all_or_nothing(store):
    good = rows_for(np.arange(4))
    bad = {k: v for k, v in rows_for(np.arange(4, 8)).items() if k != "x.value"}
    ref = store.submit_append(
        [(ref_block(good), BlockMeta.of(good, 4)), (ref_block(bad), BlockMeta.of(bad, 4))]
    )
    with pytest.raises(StoreError, match="x.value"):
        store.appended(ref)
    assert store.stats()["total"] == 0
    half = BlockMeta.of(good, 4, valid=np.array([1, 1, 0, 0], bool))
    done = store.appended(
        store.submit_append(
            [(ref_block(good), BlockMeta.of(good, 4))] * 3 + [(ref_block(good), half)]
        )
    )
    assert done.ids.tolist() == list(range(16)) and done.kept == 14
    assert "14 samples appended" in done.notes[0]  # only valid rows count against the buffer


def test_the_actor_class_is_the_core_store_with_refs():
    from kestrel_core.store import BlockStore

    assert issubclass(SampleStore, BlockStore)
    assert "append" not in SampleStore.__dict__  # one append, kestrel-core's


def test_bad_buffer_values_are_config_errors_before_an_actor_starts():
    with pytest.raises(ConfigError, match="buffer.max_samples"):
        StoreHandle.start(max_samples=0)
    with pytest.raises(ConfigError, match="needs a snapshot directory"):
        StoreHandle.start(snapshot_every=3)
    with pytest.raises(ConfigError, match="snapshots need a run directory"):
        StoreHandle.for_buffer({"min_samples": 0, "max_samples": 4, "snapshot_every": 2})


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
    view = RayBufferView(store, timeout=30)
    append(store, 0, 8)
    pinned = store.checkout([T], ["x.value"])  # ids 0-7 checked out …
    append(store, 8, 8)  # … then evicted by 8 new appends before the read
    old = np.concatenate([ray.get(r.block["x.value"])[r.rows] for r in pinned.reads])
    np.testing.assert_array_equal(
        old, rows_for(np.arange(8))["x.value"]
    )  # still the data checked out
    fetch = view.fetch(TRAINABLE, ["x.value"])
    assert fetch.new_ids.tolist() == list(range(8, 16))
    np.testing.assert_array_equal(fetch.arrays["x.value"], rows_for(np.arange(8, 16))["x.value"])
    store.release(pinned.token)
    assert (store.status(np.arange(8)) == DEL).all()


def test_view_fetch_gathers_rows_in_new_ids_order_as_fresh_arrays(store):
    for start, n in ((0, 3), (3, 2), (5, 3)):
        append(store, start, n)
    view = RayBufferView(store)
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
    fetch = RayBufferView(store).fetch(TRAINABLE, ["theta.value"], held_ids=np.arange(4))
    assert fetch.new_ids.size == 0
    assert fetch.arrays["theta.value"].shape == (0, 2)
    assert fetch.arrays["theta.value"].dtype == np.float64


def test_view_unknown_key_is_a_store_error_and_releases(store):
    append(store, 0, 4)
    with pytest.raises(StoreError, match="unknown key"):
        RayBufferView(store).fetch(TRAINABLE, ["x.vlaue"])
    assert store.open_checkouts() == 0


def test_view_discard_and_stats(store):
    append(store, 0, 8)
    view = RayBufferView(store)
    view.discard([0, 1])
    stats = view.stats()  # ordered after the discard by Ray
    assert stats["disfavoured"] == 2 and stats["training"] == 6


def test_view_is_usable_from_threads(store):
    from concurrent.futures import ThreadPoolExecutor

    append(store, 0, 8)
    view = RayBufferView(store)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: view.fetch(TRAINABLE, ["theta.value"]), range(8)))
    for fetch in results:
        np.testing.assert_array_equal(
            fetch.arrays["theta.value"], rows_for(np.arange(8))["theta.value"]
        )
    assert store.open_checkouts() == 0


def test_snapshots_are_written_by_the_driver_never_by_the_store_actor(tmp_path, track):
    """The store has no directory: due rows wait there until the driver's handle writes them."""
    handle = StoreHandle.for_buffer(
        {"min_samples": 0, "max_samples": 100, "snapshot_every": 3}, run_dir=tmp_path
    )
    track(handle.actor)
    assert "snapshot_dir" not in SampleStore.__init__.__code__.co_varnames
    append(handle, 0, 8)  # through the handle: the due rows are written at once
    snaps = tmp_path / "buffer" / "snapshots"
    written = sorted(p.name for p in snaps.glob("*.npz"))
    assert written == ["000002.npz", "000005.npz"]  # every third sample
    with np.load(snaps / "000005.npz") as one:
        assert sorted(one.files) == sorted(KEYS)
    # a copy of the handle sent to an actor (pickled) writes nothing: the folder is the driver's
    import pickle

    copy = pickle.loads(pickle.dumps(handle))
    due = [(np.arange(3), np.arange(3), {})]
    assert copy.write_snapshots(due) == 0 and copy == handle


def test_k31_the_buffer_goes_to_the_driver_and_back_into_a_new_store(tmp_path, track):
    from kestrel_core.store import read_buffer_file, write_buffer_file
    from kestrel_ray.store._snapshot import restore_store, snapshot_store

    rules = {"min_samples": 8, "max_samples": 6, "validation_samples": 2}  # keeps a discarded row
    old = start_store(track, **rules)
    assert snapshot_store(old) is None  # nothing appended yet
    for start in (0, 5, 9):
        append(old, start, {0: 5, 5: 4, 9: 3}[start])
    old.discard([5])
    write_buffer_file(tmp_path, snapshot_store(old))
    snapshot = read_buffer_file(tmp_path)

    new = start_store(track, **rules)
    assert restore_store(new, snapshot) == snapshot.n
    live = [int(s) for s in (Status.VALIDATION, Status.TRAINING, Status.DISFAVOURED)]
    ids = snapshot.ids
    np.testing.assert_array_equal(new.status(ids), old.status(ids))  # the same validation set
    got = RayBufferView(new).fetch(live, KEYS)
    np.testing.assert_array_equal(got.new_ids, ids)
    for key in KEYS:
        np.testing.assert_array_equal(got.arrays[key], rows_for(ids)[key])
    assert append(new, 0, 1).tolist() == [12]  # ids continue after the old store's


def test_a_read_beyond_the_read_budget_asks_ray_for_its_blocks_in_groups(store, monkeypatch):
    """A buffer larger than the object store is read a share of the store at a time (issue 12:
    one get of every spilled block was 3–10× slower than the same blocks in groups)."""
    import kestrel_ray.store._snapshot as snapshot_module
    import kestrel_ray.store._view as view_module
    from kestrel_ray.store._read_budget import READ_SHARE, read_budget
    from kestrel_ray.store._snapshot import snapshot_store

    node = ray.get_runtime_context().get_node_id()
    size = next(n["Resources"]["object_store_memory"] for n in ray.nodes() if n["NodeID"] == node)
    assert read_budget() == int(size * READ_SHARE)

    for start, n in ((0, 3), (3, 2), (5, 3)):
        append(store, start, n)
    view = RayBufferView(store)
    whole = view.fetch(TRAINABLE, list(KEYS))
    waits: list[int] = []
    real_wait = StoreHandle.wait

    def counting_wait(self, refs):
        if isinstance(refs, list):
            waits.append(len(refs))
        return real_wait(self, refs)

    monkeypatch.setattr(StoreHandle, "wait", counting_wait)
    monkeypatch.setattr(view_module, "read_budget", lambda: 1)  # one block a group
    grouped = view.fetch(TRAINABLE, list(KEYS))
    assert waits == [len(KEYS)] * 3  # three blocks, each key's ref of one block a wait
    np.testing.assert_array_equal(grouped.new_ids, whole.new_ids)
    for key in KEYS:
        np.testing.assert_array_equal(grouped.arrays[key], whole.arrays[key])
    assert store.open_checkouts() == 0

    waits.clear()
    monkeypatch.setattr(snapshot_module, "read_budget", lambda: 1)
    snap = snapshot_store(store)
    assert waits == [len(KEYS)] * 3
    for key in KEYS:
        np.testing.assert_array_equal(snap.arrays[key], rows_for(snap.ids)[key])
