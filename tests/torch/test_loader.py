"""CachedDataLoader: fill, eviction and scatter, dtypes, shapes, threading (K01 K03 K04 K22)."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
import torch

from kestrel_core import TRAINABLE, ConfigError, EstimatorError, Status, StoreError

from .torchtest_helpers import KEYS, GatedView, ScriptedView, append, refresh, stored, trace


def check_matches_store(loader, store, statuses=TRAINABLE):
    """The cache holds exactly the store's active ids, each row with its stored data."""
    truth = stored(store, loader.keys, statuses)
    assert sorted(loader.ids.tolist()) == sorted(truth)
    assert loader.count == len(truth)
    batch = loader.all()
    assert batch.ids.tolist() == loader.ids.tolist()
    for row, sample_id in enumerate(batch.ids.tolist()):
        for key in loader.keys:
            got = batch[key][row].cpu().numpy()
            np.testing.assert_array_equal(got, truth[sample_id][key].astype(got.dtype), err_msg=key)


def test_first_sync_blocks_and_fills(make_store, open_loader, device):
    store = make_store(max_samples=16)
    append(store, 8)
    loader = open_loader(store.view(), KEYS, device=device)
    assert loader.count == 0
    assert loader.sync() is True
    assert loader.device == torch.device(device)
    check_matches_store(loader, store)
    assert all(t.device.type == torch.device(device).type for t in loader.all().values())


def test_eviction_frees_rows_that_the_next_fetch_refills(make_store, open_loader, device):
    store = make_store(min_samples=0, max_samples=8)
    append(store, 8)
    loader = open_loader(store.view(), KEYS, device=device)
    loader.sync()
    assert loader._row_to_id.size == 8

    append(store, 4)  # ids 8..11; rotation tombstones 0..3
    refresh(loader)
    check_matches_store(loader, store)
    # rows 0..3 were live while the fetch ran: the new rows went past the end (written in the
    # background), and 0..3 are free for the next fetch
    assert loader._row_to_id[:4].tolist() == [-1] * 4
    assert sorted(loader.ids.tolist()) == list(range(4, 12))
    capacity = loader._row_to_id.size

    append(store, 4)  # ids 12..15 evict 4..7 and fill the rows freed last time: no growth
    refresh(loader)
    check_matches_store(loader, store)
    assert loader._row_to_id.size == capacity
    assert sorted(loader._row_to_id[:4].tolist()) == [12, 13, 14, 15]

    store.discard([4, 5])  # DISFAVOURED is still trainable
    append(store, 2)  # 12, 13: min_samples 0 so the disfavoured go first
    refresh(loader)
    check_matches_store(loader, store)

    append(store, 5)
    refresh(loader)
    check_matches_store(loader, store)
    assert loader.count == 8

    mixed = make_store(min_samples=0, max_samples=12)
    append(mixed, 8)
    both = open_loader(mixed.view(), KEYS, device=device)
    both.sync()
    mixed.discard([0, 1])
    append(mixed, 4)  # evicts the 2 disfavoured: they become free rows, the 4 new go past the end
    refresh(both)
    check_matches_store(both, mixed)
    assert both._row_to_id[:2].tolist() == [-1, -1] and both.count == 10
    append(mixed, 2)  # the next 2 new rows refill the freed ones
    refresh(both)
    check_matches_store(both, mixed)
    assert sorted(both._row_to_id[:2].tolist()) == [12, 13]

    bigger = make_store(max_samples=100)
    append(bigger, 3)
    grow = open_loader(bigger.view(), KEYS, device=device)
    grow.sync()
    for _ in range(6):
        append(bigger, 7)
        refresh(grow)
        check_matches_store(grow, bigger)
    assert grow._row_to_id.size < 2 * grow.count + 8, "capacity grows geometrically, not per sync"


def test_batch_rows_match_their_ids(make_store, open_loader, device):
    store = make_store(max_samples=8)
    append(store, 8)
    append(store, 5)  # leaves holes after eviction: sample_batch must map through live rows
    loader = open_loader(store.view(), KEYS, device=device)
    loader.sync()
    append(store, 2)
    refresh(loader)
    batch = loader.sample_batch(256)
    assert len(batch) == 256 and batch["x.value"].shape == (256, 3)
    ids = torch.as_tensor(batch.ids, dtype=torch.float64)
    torch.testing.assert_close(batch["x.value"][:, 0].cpu().double(), ids)
    assert set(batch.ids.tolist()) <= set(loader.ids.tolist())
    assert len(set(batch.ids.tolist())) == loader.count, "256 uniform draws from 8 rows miss none"

    draw = [
        loader.sample_batch(16, generator=torch.Generator(device).manual_seed(3)).ids
        for _ in range(2)
    ]
    np.testing.assert_array_equal(*draw)


def test_k01_log_prob_shapes_normalised_to_float64_vector(open_loader, device):
    # scalars and 0-d arrays
    values = [
        np.float64(-1.0),
        np.array(-2.0),
        np.float64(-3.0),
        np.array(-4.0),
    ]
    x = np.arange(8, dtype=np.float64).reshape(4, 2)
    view = ScriptedView(
        [
            (range(4), range(4), {"theta.log_prob": np.array(values), "x.value": x}),
            (
                range(8),
                range(4, 8),
                {"theta.log_prob": np.array([[-5.0], [-6.0], [-7.0], [-8.0]]), "x.value": x + 8},
            ),
            (range(8), [], {"theta.log_prob": np.zeros(0), "x.value": x[:0]}),
        ]
    )
    loader = open_loader(view, ["theta.log_prob", "x.value"], device=device)
    loader.sync()
    batch = loader.sample_batch(4)
    assert batch["theta.log_prob"].dtype == torch.float64 and batch["theta.log_prob"].shape == (4,)
    refresh(loader)
    assert loader.count == 8
    log_prob = loader.all()["theta.log_prob"]
    assert log_prob.shape == (8,)
    np.testing.assert_array_equal(log_prob.cpu().numpy(), -1.0 - np.arange(8))

    bad = ScriptedView([(range(4), range(4), {"theta.log_prob": np.zeros((4, 2)), "x.value": x})])
    loader = open_loader(bad, ["theta.log_prob", "x.value"], device=device)
    with pytest.raises(
        StoreError, match=r"'theta.log_prob' has per-sample shape \(2,\), expected \(\) or \(1,\)"
    ):
        loader.sync()


def test_k01_log_prob_stored_as_column(make_store, open_loader):
    store = make_store()
    block = trace(6)
    block["theta.log_prob"] = block["theta.log_prob"][:, None]  # every sample stored as shape (1,)
    store.append(block, 6)
    loader = open_loader(store.view(), KEYS)
    loader.sync()
    got = loader.sample_batch(4)["theta.log_prob"]
    assert got.shape == (4,) and got.dtype == torch.float64


def test_shape_change_names_key_and_both_shapes(open_loader):
    view = ScriptedView(
        [
            (range(2), range(2), {"x.value": np.zeros((2, 3))}),
            (range(4), [2, 3], {"x.value": np.zeros((2, 4))}),
            (range(4), [], {"x.value": np.zeros((0, 4))}),
        ]
    )
    loader = open_loader(view, ["x.value"])
    loader.sync()
    with pytest.raises(
        StoreError, match=r"'x.value' arrived with per-sample shape \(4,\), the cache holds \(3,\)"
    ):
        refresh(loader)


def test_k03_batches_are_copies(make_store, open_loader, device):
    store = make_store()
    append(store, 8)
    before = stored(store, KEYS, TRAINABLE)
    loader = open_loader(store.view(), KEYS, device=device)
    loader.sync()
    first = loader.all()
    reference = first["x.value"].clone()
    first["x.value"].add_(1.0)
    loader.sample_batch(8)["x.value"].add_(1.0)
    torch.testing.assert_close(loader.all()["x.value"], reference)
    after = stored(store, KEYS, TRAINABLE)
    for sample_id, sample in before.items():
        np.testing.assert_array_equal(after[sample_id]["x.value"], sample["x.value"])


def test_k03_read_only_fetched_arrays(open_loader, device):
    x = np.arange(16, dtype=np.float64).reshape(8, 2)
    x.flags.writeable = False  # a store may hand out read-only views
    view = ScriptedView([(range(8), range(8), {"x.value": x})])
    loader = open_loader(view, ["x.value"], device=device)
    loader.sync()  # filterwarnings=error turns a "not writable" warning into a failure
    loader.all()["x.value"].add_(1.0)
    np.testing.assert_array_equal(x, np.arange(16, dtype=np.float64).reshape(8, 2))
    np.testing.assert_array_equal(loader.all()["x.value"].cpu().numpy(), x)


@pytest.mark.parametrize("first,second", [(np.float32, np.float64), (np.float64, np.float32)])
def test_k04_dtype_change_keeps_the_wider_dtype(make_store, open_loader, device, first, second):
    store = make_store(max_samples=8)
    append(store, 8, dtype=first)
    loader = open_loader(store.view(), KEYS, device=device)
    loader.sync()
    assert loader.all()["x.value"].dtype == torch.from_numpy(np.zeros(0, first)).dtype
    append(store, 4, dtype=first)  # 4 evictions: those rows are free for the next fetch
    refresh(loader)
    capacity, freed = loader._row_to_id.size, np.flatnonzero(loader._row_to_id < 0)
    assert freed.size >= 4
    append(store, 4, dtype=second)  # the new rows, in the other dtype, go into the freed rows
    with pytest.warns(UserWarning) as record:
        refresh(loader)
    assert len(record) == 1
    message = str(record[0].message)
    assert "'x.value'" in message and "torch.float32" in message and "torch.float64" in message
    assert loader._row_to_id.size == capacity and (loader._row_to_id[freed[:4]] >= 12).all()
    assert loader.all()["x.value"].dtype == torch.float64
    check_matches_store(loader, store)
    append(store, 4, dtype=second)
    append(store, 4, dtype=first)
    # reported once per key: a second change warns no more (warnings are errors here)
    refresh(loader)
    check_matches_store(loader, store)


def test_k04_theta_float64_never_downcast(open_loader):
    theta32 = np.arange(8, dtype=np.float32).reshape(4, 2)
    theta64 = np.array([[1e-9, 1 + 1e-12]] * 4)  # not representable in float32
    view = ScriptedView(
        [
            (range(4), range(4), {"theta.value": theta32}),
            (range(8), range(4, 8), {"theta.value": theta64}),
            (range(8), [], {"theta.value": theta64[:0]}),
        ]
    )
    loader = open_loader(view, ["theta.value"])
    loader.sync()
    with pytest.warns(UserWarning, match="'theta.value'"):
        refresh(loader)
    theta = loader.all()["theta.value"]
    assert theta.dtype == torch.float64
    np.testing.assert_array_equal(theta[4:].numpy(), theta64)


def test_forced_dtype_casts_without_warning(make_store, open_loader):
    store = make_store()
    append(store, 4)
    append(store, 4, dtype=np.float32)
    loader = open_loader(store.view(), KEYS, dtypes={"x.value": torch.float32})
    loader.sync()
    assert loader.all()["x.value"].dtype == torch.float32
    assert loader.all()["theta.value"].dtype == torch.float64


def test_transforms_run_before_caching(make_store, open_loader):
    store = make_store()
    append(store, 6)
    calls = []

    def standardise(theta):
        calls.append(threading.current_thread().name)
        return (theta - 1.0) * 2.0

    loader = open_loader(store.view(), KEYS, transforms={"theta.value": standardise}, name="tr")
    loader.sync()
    batch = loader.all()
    expected = (torch.as_tensor(batch.ids, dtype=torch.float64)[:, None].expand(-1, 2) - 1.0) * 2.0
    torch.testing.assert_close(batch["theta.value"], expected)
    assert calls == ["kestrel-loader-tr"], "transforms run once, in the background thread"


def test_max_samples_caps_the_cache(make_store, open_loader):
    store = make_store()
    append(store, 20)
    loader = open_loader(store.view(), KEYS, max_samples=8)
    loader.sync()
    assert loader.count == 8
    assert set(loader.ids.tolist()) <= set(range(20))


def test_k22_empty_training_set_error(make_store, open_loader):
    store = make_store(min_samples=4, max_samples=8, validation_samples=8)
    append(store, 8)  # all eight stay VALIDATION
    expected = r"no samples with status TRAINING/DISFAVOURED \(buffer: 0 train, 8 validation\)"
    loader = open_loader(store.view(), KEYS)
    with pytest.raises(EstimatorError, match=expected):
        loader.sample_batch(4)
    with pytest.raises(EstimatorError, match=expected):
        loader.sync()
    with pytest.raises(EstimatorError, match=expected):
        loader.sample_batch(4)
    with pytest.raises(EstimatorError, match=expected):
        loader.all()

    validation = open_loader(store.view(), KEYS, statuses=[Status.VALIDATION])
    validation.sync()
    assert validation.count == 8

    append(store, 8)  # the first eight become TRAINING: the first sync succeeds now
    assert loader.sync() is True and loader.count == 8


def test_sync_does_not_wait_for_a_running_fetch(make_store, open_loader):
    store = make_store()
    append(store, 4)
    view = GatedView(store.view(), gate_from=2)
    loader = open_loader(view, KEYS)
    assert loader.sync() is True  # fetch 1 passes; fetch 2 starts and waits for the gate
    assert view.waiting.wait(10)
    append(store, 4)
    for _ in range(3):
        assert loader.sync() is False
    assert loader.count == 4
    view.gate.set()
    refresh(loader)
    check_matches_store(loader, store)


def test_without_prefetch_every_sync_takes_the_store_as_it_is(make_store, open_loader, device):
    store = make_store(max_samples=8)
    append(store, 8)
    view = GatedView(store.view(), gate_from=2)
    loader = open_loader(view, KEYS, device=device, prefetch=False)
    assert not loader.prefetch and "prefetch=False" in repr(loader)
    assert loader.sync() is True and view.calls == 1
    assert not view.waiting.wait(0.2)  # no fetch runs between syncs
    view.gate.set()
    for n in (4, 4, 0):  # rotation evicts the oldest rows; a sync applies it at once
        append(store, n)
        calls = view.calls
        assert loader.sync() is True and view.calls == calls + 1  # one fetch, waited for
        check_matches_store(loader, store)
    assert sorted(loader.ids.tolist()) == list(range(8, 16))


def test_background_exception_reraised_on_next_sync(make_store, open_loader):
    store = make_store()
    append(store, 4)
    view = GatedView(store.view(), fail_on=2)
    loader = open_loader(view, KEYS, name="boom")
    loader.sync()
    with pytest.raises(RuntimeError, match="fetch failed on purpose") as info:
        loader.sync(wait=True)
    if sys.version_info >= (3, 11):
        assert any("'boom'" in note for note in info.value.__notes__)
    append(store, 4)
    refresh(loader)  # the loader recovers: the next sync starts a new fetch
    check_matches_store(loader, store)
    assert loader.thread.is_alive()


def test_first_sync_reraises_fetch_error(open_loader):
    class Broken:
        def fetch(self, *args, **kwargs):
            raise StoreError("checkout: unknown key(s) ['y.value']")

        def stats(self):
            return {}

    loader = open_loader(Broken(), ["y.value"])
    with pytest.raises(StoreError, match="unknown key"):
        loader.sync()


def test_one_named_daemon_thread_stopped_on_close(make_store):
    from kestrel_torch import CachedDataLoader

    store = make_store()
    append(store, 4)
    before = {t.name for t in threading.enumerate()}
    loader = CachedDataLoader(store.view(), KEYS, name="train")
    for _ in range(5):
        loader.sync()
    threads = [t for t in threading.enumerate() if t.name not in before]
    assert [t.name for t in threads] == ["kestrel-loader-train"] and threads[0].daemon
    loader.close()
    assert not loader.thread.is_alive()
    loader.close()  # idempotent
    with pytest.raises(EstimatorError, match="closed"):
        loader.sync()
    with CachedDataLoader(store.view(), KEYS, name="ctx") as ctx:
        ctx.sync()
    assert not ctx.thread.is_alive()


def test_garbage_collected_loader_stops_its_thread(make_store):
    import gc

    from kestrel_torch import CachedDataLoader

    store = make_store()
    append(store, 4)
    loader = CachedDataLoader(store.view(), KEYS)
    loader.sync(wait=True)
    thread = loader.thread
    del loader
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


def test_bad_arguments_raise_config_errors(make_store):
    from kestrel_torch import CachedDataLoader

    view = make_store().view()
    with pytest.raises(ConfigError, match="distinct"):
        CachedDataLoader(view, ["x.value", "x.value"])
    with pytest.raises(ConfigError, match=r"transforms=.*\['y.value'\]"):
        CachedDataLoader(view, ["x.value"], transforms={"y.value": abs})
    with pytest.raises(ConfigError, match="max_samples=-1"):
        CachedDataLoader(view, ["x.value"], max_samples=-1)


def test_discard_through_batch_reaches_store(make_store, open_loader, device):
    store = make_store(max_samples=8, validation_samples=2)
    append(store, 10)  # 8 TRAINING, 2 VALIDATION
    loader = open_loader(store.view(), KEYS, device=device)
    loader.sync()
    batch = loader.sample_batch(32)
    mask = batch["x.value"][:, 0] < 3  # ids 0, 1, 2
    batch.discard(mask)
    chosen = sorted(set(batch.ids[mask.cpu().numpy()].tolist()))
    assert chosen and set(chosen) <= {0, 1, 2}
    statuses = store.status(np.arange(10))
    assert all(statuses[i] == Status.DISFAVOURED for i in chosen)
    assert (statuses == Status.DISFAVOURED).sum() == len(chosen)


def test_plain_syncs_pick_up_new_samples(make_store, open_loader):
    """Non-waiting syncs, as a training loop calls them, see appended samples within a few calls."""
    store = make_store()
    append(store, 64)
    loader = open_loader(store.view(), KEYS)
    loader.sync()
    append(store, 64)
    deadline = time.monotonic() + 10
    while loader.count < 128 and time.monotonic() < deadline:
        loader.sync()
        time.sleep(0.001)
    assert loader.count == 128
