"""Issue 32 item 2: a training set larger than the object store's share trains from disk.

Two deterministic launches of the same config and seed, one with ``buffer.storage: memory``,
one with ``buffer.storage: disk`` and a store cache of 16 rows (far below the buffer's 112):
the disk launch hands its older blocks to the journal, the loader's background fetch reads
them back (counted in ``status.json``'s buffer counts), training reaches a finite loss, and
the buffer, the weights and the posterior samples are bit-identical to the in-memory launch.
A ``disk`` buffer without a journal is refused at load naming both keys. In-process on the
session's Ray, epoch-bounded.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from kestrel import launch
from kestrel_core import ConfigError
from kestrel_core.store._buffer_file import read_buffer_file

from .test_launch import MODELS, toy

EPOCHS = 4


def config(tmp_path, storage: str, **buffer) -> dict:
    cfg = toy(
        tmp_path,
        estimator={
            "_target_": "kestrel_torch.GaussianPosterior",
            "max_epochs": EPOCHS,
            "batch_size": 16,
        },
        x=f"{MODELS}.Noise",
        simulate_interval=0.0,
        epochs_per_round=1,
        max_samples=96,  # the buffer rotates: eviction at the same points in both launches
        storage=storage,
        **buffer,
    )
    cfg["budget"] = {"simulations": 160}  # 80 initial rows, then rounds of 16
    cfg["deterministic"] = True
    cfg["sample"]["posterior"]["n"] = 20
    return cfg


def files(run):
    snapshot = read_buffer_file(str(run / "buffer" / "snapshots"))
    weights = (run / "graph" / "z" / "estimator.pt").read_bytes()
    samples = sorted((run / "samples" / "posterior").rglob("[0-9]*.npz"))
    return snapshot, weights, [p.read_bytes() for p in samples]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_session):
    tmp = tmp_path_factory.mktemp("disk")
    memory = launch(config(tmp, "memory"), tmp / "memory", seed=21, progress=False)
    disk = launch(config(tmp, "disk", cache_samples=16), tmp / "disk", seed=21, progress=False)
    return tmp, memory, disk


def test_a_disk_buffer_trains_from_the_journal_to_a_finite_loss(runs):
    tmp, _, disk = runs
    # max_epochs 4, but training goes on while the budget's 5 rounds come (round 5 enters at
    # the end of epoch 6) and trains one epoch on the last (issue 31 item 4): 7 epochs
    assert disk.status == "completed" and disk.epochs == {"z": EPOCHS + 3}
    counts = json.loads((tmp / "disk" / "status.json").read_text())["buffer"]
    assert counts["on_disk"] > 0  # rows held only in the journal, not in the object store
    assert counts["disk_reads"] > 0  # rows the loader's fetch read back from it
    with open(tmp / "disk" / "graph" / "z" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    losses = [float(r[k]) for r in rows for k in ("train_loss", "val_loss") if r.get(k)]
    assert losses and np.all(np.isfinite(losses))
    log = (tmp / "disk" / "graph" / "driver" / "output.log").read_text()
    assert "the buffer trains from disk (buffer.storage: disk)" in log


def test_the_same_seed_gives_the_same_run_from_disk_as_from_memory(runs):
    tmp, memory, disk = runs
    assert memory.status == disk.status == "completed" and memory.epochs == disk.epochs
    plain = json.loads((tmp / "memory" / "status.json").read_text())["buffer"]
    assert "on_disk" not in plain  # storage: memory keeps every block in the object store
    a, b = files(tmp / "memory"), files(tmp / "disk")
    for key in a[0].arrays:
        np.testing.assert_array_equal(a[0].arrays[key], b[0].arrays[key], err_msg=key)
    np.testing.assert_array_equal(a[0].ids, b[0].ids)
    np.testing.assert_array_equal(a[0].statuses, b[0].statuses)
    assert a[1] == b[1], "estimator.pt differs"
    assert a[2] and a[2] == b[2], "posterior samples differ"


def test_a_disk_buffer_without_its_journal_is_refused_naming_both_keys(tmp_path):
    cfg = config(tmp_path, "disk", journal=False)
    with pytest.raises(ConfigError, match=r"buffer\.storage: disk .* buffer\.journal is false"):
        launch(cfg, tmp_path / "run", seed=1, progress=False)
    assert not (tmp_path / "run" / "buffer").exists()


def test_a_resumed_disk_launch_continues_as_the_resumed_memory_launch(runs):
    """Both runs resumed with 32 more simulations: the disk run's snapshot goes back into the
    object store, its new blocks to disk again, and both give the same files."""
    tmp, _, _ = runs
    more = ["budget.simulations=192"]
    memory = launch(None, tmp / "memory", overrides=more, progress=False)
    disk = launch(None, tmp / "disk", overrides=more, progress=False)
    assert memory.status == disk.status == "completed"
    counts = json.loads((tmp / "disk" / "status.json").read_text())
    assert counts["budget"]["used"] == 192
    a, b = files(tmp / "memory"), files(tmp / "disk")
    assert a[0].next_id == b[0].next_id == 192
    for key in a[0].arrays:
        np.testing.assert_array_equal(a[0].arrays[key], b[0].arrays[key], err_msg=key)
    np.testing.assert_array_equal(a[0].statuses, b[0].statuses)
    assert a[1] == b[1], "estimator.pt differs after the resume"
