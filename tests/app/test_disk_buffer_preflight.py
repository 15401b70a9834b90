"""Issue 32 item 2: a buffer larger than the object store trains from disk instead of being
refused (kestrel.preflight._capacity), the journal's disk checked; refused where it cannot
(``buffer.storage: memory``, no journal, a journal moved by ``paths.buffer``). No Ray."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from kestrel.preflight._capacity import (
    cache_rows,
    check_capacity,
    check_journal_space,
    check_run_disk,
    trains_from_disk,
)
from kestrel_core import ConfigError, load_config
from kestrel_core.internal import DiskFullError

MiB = 2**20
STORE = 200 * MiB


def buffer(storage="auto", journal=True, cache_samples=None, max_samples=1000):
    return SimpleNamespace(
        max_samples=max_samples,
        min_samples=32,
        validation_samples=16,
        simulate_count=64,
        storage=storage,
        journal=journal,
        cache_samples=cache_samples,
    )


def test_auto_trains_from_disk_only_a_buffer_that_does_not_fit():
    assert trains_from_disk(buffer(), {"x": MiB}, STORE)  # 1016 MiB > 200 MiB
    assert not trains_from_disk(buffer(max_samples=100), {"x": MiB}, STORE)
    assert not trains_from_disk(buffer(), {"x": MiB}, None)  # unknown store: memory
    assert not trains_from_disk(buffer(journal=False), {"x": MiB}, STORE)
    assert not trains_from_disk(buffer("memory"), {"x": MiB}, STORE)
    assert trains_from_disk(buffer("disk", max_samples=10), {"x": MiB}, STORE)
    assert cache_rows(buffer(), MiB, STORE) == 100  # half the store
    assert cache_rows(buffer(cache_samples=7), MiB, STORE) == 7


def test_a_disk_buffer_is_logged_not_refused(caplog):
    log = logging.getLogger("test-disk-capacity")
    with caplog.at_level(logging.INFO, logger="test-disk-capacity"):
        need = check_capacity(buffer(), {"x": MiB}, STORE, log=log)
    assert need == 1016 * MiB
    text = caplog.records[-1].getMessage()
    assert "the buffer trains from disk (buffer.storage: auto)" in text
    assert "keeps the newest 100 samples (100 MiB)" in text and "RUN/buffer/journal" in text


def test_a_buffer_that_may_not_go_to_disk_is_refused_naming_the_keys():
    with pytest.raises(ConfigError, match=r"cannot fit: .*buffer\.storage: auto or disk\)$"):
        check_capacity(buffer("memory"), {"x": MiB}, STORE)
    with pytest.raises(ConfigError, match=r"with buffer\.journal: true; it is false\)$"):
        check_capacity(buffer(journal=False), {"x": MiB}, STORE)


def test_the_journal_disk_must_hold_the_buffer(tmp_path):
    b = buffer()
    assert check_journal_space(str(tmp_path), b, {"x": MiB}, free=4 * 1016 * MiB) is None
    note = check_journal_space(str(tmp_path), b, {"x": MiB}, free=1500 * MiB)
    assert note and "trains from disk and needs about 1.98 GiB" in note
    with pytest.raises(DiskFullError, match=r"1000 \+ 16|buffer trains from disk"):
        check_journal_space(str(tmp_path), b, {"x": MiB}, free=10 * MiB)


def test_a_disk_buffer_whose_journal_paths_buffer_moves_is_refused(tmp_path, monkeypatch):
    import kestrel.preflight._capacity as capacity

    monkeypatch.setattr(capacity, "store_capacity", lambda: STORE)
    elsewhere = tmp_path / "elsewhere"
    run = SimpleNamespace(
        root=str(tmp_path / "run"),
        journal=str(elsewhere / "journal"),
        snapshots=str(elsewhere / "snapshots"),
        node_dir=lambda node: str(tmp_path / "run" / "graph" / node),
    )
    config = SimpleNamespace(buffer=buffer("disk"), graph=SimpleNamespace(latents=["z"]))
    session = SimpleNamespace(config=config, run=run, sample_bytes={"x": 1024}, notes=[])
    with pytest.raises(ConfigError, match=r"paths\.buffer puts it in .*elsewhere"):
        check_run_disk(session)
    run.journal = str(tmp_path / "run" / "buffer" / "journal")
    check_run_disk(session)  # the default place: checked, no note (the disk has room)
    assert session.notes == []


def test_the_config_keys_are_checked_at_load():
    base = {
        "buffer": {"min_samples": 1, "max_samples": 2, "validation_samples": 0},
        "graph": {"z": {"simulator": {"_target_": "kestrel_core.Product", "priors": []}}},
    }
    cfg = load_config(base, check_targets=())
    assert cfg.buffer.storage == "auto" and cfg.buffer.cache_samples is None
    for bad, match in [
        ({"storage": "ssd"}, r"buffer\.storage: expected auto, memory or disk"),
        ({"cache_samples": 0}, r"buffer\.cache_samples: expected an integer ≥ 1"),
        (
            {"storage": "disk", "journal": False},
            r"buffer\.storage: disk .* buffer\.journal is false .* buffer\.journal: true",
        ),
    ]:
        with pytest.raises(ConfigError, match=match):
            load_config({**base, "buffer": {**base["buffer"], **bad}}, check_targets=())
