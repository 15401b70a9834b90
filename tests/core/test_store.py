"""InMemoryStore: the store contract, plus what only the in-memory store and its view do."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest

from kestrel_core import BlockMeta, ConfigError, InMemoryStore, Status, StoreError, StoreWarning
from kestrel_core.testing import KEYS, StoreContract, rows_for
from tests.core.store_cases import with_case_ids

T, D, V = Status.TRAINING, Status.DISFAVOURED, Status.VALIDATION


@with_case_ids
class TestInMemoryStore(StoreContract):
    @pytest.fixture
    def make_store(self):
        def make(min_samples, max_samples, validation_samples, **kw):
            return InMemoryStore(
                min_samples=min_samples,
                max_samples=max_samples,
                validation_samples=validation_samples,
                **kw,
            )

        return make

    @pytest.fixture
    def make_block(self):
        return dict


def filled(n: int = 8, **kw) -> InMemoryStore:
    kw = {"min_samples": 2, "max_samples": 100, "validation_samples": 0, **kw}
    store = InMemoryStore(**kw)
    store.append(rows_for(np.arange(n)), n)
    return store


def test_oversized_append_warning_is_a_store_warning():
    store = InMemoryStore(min_samples=1, max_samples=2, validation_samples=1)
    with pytest.warns(StoreWarning, match="the oldest 1 become TOMBSTONE"):
        store.append(rows_for(np.arange(4)), 4)


def test_appended_data_is_copied_and_read_only():
    source = rows_for(np.arange(4))
    store = InMemoryStore(min_samples=2, max_samples=10, validation_samples=0)
    store.append(source, 4)
    source["theta.value"][:] = -1.0  # the caller keeps using its arrays
    co = store.checkout([T], ["theta.value"])
    store.release(co.token)
    stored = co.reads[0].block["theta.value"]
    np.testing.assert_array_equal(stored, rows_for(np.arange(4))["theta.value"])
    assert not stored.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        stored[0, 0] = 5.0


def test_non_native_byte_order_is_stored_native():
    arrays = rows_for(np.arange(3))
    arrays["theta.value"] = arrays["theta.value"].astype(">f8")
    store = InMemoryStore(min_samples=2, max_samples=10, validation_samples=0)
    store.append(arrays, 3)
    assert store.schema["theta.value"][1].isnative
    fetch = store.view().fetch([T], ["theta.value"])
    assert fetch.arrays["theta.value"].dtype.isnative
    np.testing.assert_array_equal(
        fetch.arrays["theta.value"], rows_for(np.arange(3))["theta.value"]
    )


def test_view_fetch_returns_independent_copies_in_new_ids_order():
    store = InMemoryStore(min_samples=2, max_samples=100, validation_samples=0)
    for n in (3, 5, 2):
        start = store.stats()["total"]
        store.append(rows_for(np.arange(start, start + n)), n)
    view = store.view()
    fetch = view.fetch([T], list(KEYS), held_ids=np.array([1, 4]))
    assert fetch.active_ids.tolist() == list(range(10))
    assert fetch.new_ids.tolist() == [0, 2, 3, 5, 6, 7, 8, 9]
    for key in KEYS:
        np.testing.assert_array_equal(fetch.arrays[key], rows_for(fetch.new_ids)[key])
    fetch.arrays["x.value"] += 100  # the loader may write into what it fetched
    again = view.fetch([T], ["x.value"])
    np.testing.assert_array_equal(again.arrays["x.value"], rows_for(np.arange(10))["x.value"])
    assert store.open_checkouts == 0  # fetch released its checkout
    assert view.stats() == store.stats()
    view.discard([0, 1])
    assert store.status([0, 1]).tolist() == [D, D]


def test_view_fetch_on_empty_selection_has_schema_shapes():
    store = filled(4)
    fetch = store.view().fetch([D], ["theta.value", "x.value"])
    assert fetch.new_ids.size == 0
    assert fetch.arrays["theta.value"].shape == (0, 2)
    assert fetch.arrays["x.value"].dtype == np.float32


def test_view_fetch_before_first_append_is_empty():
    store = InMemoryStore(min_samples=2, max_samples=10, validation_samples=0)
    fetch = store.view().fetch([T, D], ["x.value"])
    assert fetch.active_ids.size == 0 and fetch.arrays["x.value"].shape == (0,)


def test_concurrent_appends_and_fetches_keep_ids_unique():
    store = InMemoryStore(min_samples=10, max_samples=10_000, validation_samples=10)
    view = store.view()
    errors = []

    def writer():
        try:
            for _ in range(50):
                store.append({"x.value": np.ones((4, 2))}, 4)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    def reader():
        try:
            held = np.empty(0, dtype=np.int64)
            for _ in range(50):
                fetch = view.fetch([T], ["x.value"], held_ids=held)
                held = np.union1d(held, fetch.new_ids)
                assert fetch.arrays["x.value"].shape == (fetch.new_ids.size, 2)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer) for _ in range(3)] + [
        threading.Thread(target=reader)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = store.stats()
    assert stats["total"] == 600
    assert stats["validation"] == 10 and stats["training"] == 590


@dataclass
class _Buffer:
    min_samples: int = 4
    max_samples: int = 6
    validation_samples: int = 2
    snapshot_every: int = 0


def test_from_config_reads_attributes_or_keys(tmp_path):
    store = InMemoryStore.from_config(_Buffer())
    assert (store.min_samples, store.max_samples, store.validation_samples) == (4, 6, 2)
    store = InMemoryStore.from_config(
        {"min_samples": 1, "max_samples": 2, "validation_samples": 0, "snapshot_every": 2},
        snapshot_dir=tmp_path,
    )
    store.append(rows_for(np.arange(2)), 2)
    assert [p.name for p in tmp_path.iterdir()] == ["000001.npz"]
    with pytest.raises(ConfigError, match="buffer.validation_samples is required"):
        InMemoryStore.from_config({"min_samples": 1, "max_samples": 2})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_samples": 0}, r"buffer\.max_samples must be ≥ 1, got 0"),
        ({"min_samples": -1}, r"buffer\.min_samples.*-1"),
        ({"validation_samples": 2.0}, r"buffer\.validation_samples.*2\.0"),
        ({"snapshot_every": 5}, r"buffer\.snapshot_every=5 needs a snapshot directory"),
    ],
)
def test_invalid_buffer_values_raise_config_error(kwargs, match):
    base = {"min_samples": 2, "max_samples": 4, "validation_samples": 1}
    with pytest.raises(ConfigError, match=match):
        InMemoryStore(**{**base, **kwargs})


def test_append_rejects_malformed_blocks():
    store = InMemoryStore(min_samples=2, max_samples=10, validation_samples=0)
    with pytest.raises(StoreError, match="flat key"):
        store.append({"theta": np.zeros((2, 1))}, 2)
    with pytest.raises(StoreError, match="non-numeric"):
        store.append({"x.value": np.array([["a"], ["b"]])}, 2)
    with pytest.raises(StoreError, match="non-empty mapping"):
        store.append([np.zeros(2)], 2)
    with pytest.raises(TypeError):
        store.append({"x.value": np.zeros((2, 1))}, 2.0)
    assert store.stats()["total"] == 0 and store.schema == {}


def test_append_takes_n_alone_for_a_block_of_arrays():
    store = InMemoryStore(min_samples=0, max_samples=10, validation_samples=0)
    assert store.append(rows_for(np.arange(3)), 3).tolist() == [0, 1, 2]
    assert store.append(
        rows_for(np.arange(3, 5)), BlockMeta.of(rows_for(np.arange(3, 5)))
    ).tolist() == [3, 4]


def test_append_rejects_arrays_that_differ_from_their_metadata():
    store = InMemoryStore(min_samples=0, max_samples=10, validation_samples=0)
    arrays = rows_for(np.arange(4))
    meta = BlockMeta.of({**arrays, "x.value": arrays["x.value"].astype(np.float64)}, 4)
    with pytest.raises(StoreError, match=r"'x\.value'.*float32.*metadata says.*float64"):
        store.append(arrays, meta)
    assert store.stats()["total"] == 0


def test_checkout_subset_is_reproducible_with_a_seed():
    a, b = filled(40, seed=7), filled(40, seed=7)
    checkouts = [s.checkout([T], ["x.value"], max_samples=5) for s in (a, b)]
    for store, co in zip((a, b), checkouts):
        store.release(co.token)
    assert checkouts[0].active_ids.tolist() == checkouts[1].active_ids.tolist()
