"""The journal's read of an append whose block was lost with its node (issue 32, item 4).

A block whose only copy died with its node is rebuilt by Ray when its replica can restart; when
none can, Ray waits for ever. The journal writer (kestrel.persist._journal) never waits for
ever: it waits in bounded steps and calls its ``between_waits`` (the launch's restart watch,
which raises once a replica has no node left) between two; a block that cannot be read is left
out of the journal, its ids named, and the append's other blocks are written.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import ray

import kestrel.persist._journal as journal_module
from kestrel.persist._journal import JournalWriter
from kestrel_core import BlockMeta, SimulatorError
from kestrel_core.store import journal_files, read_journal_file
from kestrel_core.testing import KEYS, rows_for
from kestrel_ray.store._handle import StoreHandle

LOG = logging.getLogger("test-journal-lost")


@ray.remote(num_cpus=0)
class Gate:
    """A replica that never answers (its node lost, no node left to restart it on)."""

    async def hold(self) -> None:
        await asyncio.Event().wait()


@ray.remote(num_cpus=0)
def broken() -> None:
    raise RuntimeError("the block cannot be rebuilt")


def append(store: StoreHandle, lost_ref) -> tuple[list, np.ndarray]:
    """Three blocks of 4 rows appended; block 1's first key is ``lost_ref``."""
    parts = []
    for b in range(3):
        arrays = rows_for(np.arange(4 * b, 4 * b + 4))
        block = {k: ray.put(v) for k, v in arrays.items()}
        if b == 1:
            block[KEYS[0]] = lost_ref
        parts.append((block, BlockMeta.of(arrays, 4)))
    return parts, store.appended(store.submit_append(parts)).ids


def written(folder) -> dict[tuple[int, int], np.ndarray]:
    return {(f.first, f.last): read_journal_file(f).ids for f in journal_files(folder)}


@pytest.fixture
def store(track):
    handle = StoreHandle.start(max_samples=1000)
    track(handle.actor)
    return handle


def test_a_block_no_node_can_rebuild_is_named_and_the_rest_is_written(
    tmp_path, store, track, caplog, monkeypatch
):
    monkeypatch.setattr(journal_module, "WAIT_EVERY", 0.05)
    gate = Gate.remote()
    track(gate)
    parts, ids = append(store, gate.hold.remote())
    writer = JournalWriter(tmp_path / "journal", LOG)
    polls = []

    def restart_watch():  # gives up at its third look, as after KESTREL_RESTART_WAIT
        polls.append(1)
        if len(polls) == 3:
            raise SimulatorError("node 'x': actor (replica 0) has waited 5 s for a node")

    writer.between_waits = restart_watch
    with caplog.at_level(logging.WARNING, LOG.name), pytest.raises(SimulatorError):
        writer.write(store, parts, ids)
    assert len(polls) == 3
    files = written(tmp_path / "journal")
    assert sorted(files) == [(0, 3), (8, 11)]
    np.testing.assert_array_equal(files[8, 11], [8, 9, 10, 11])
    assert "ids 4…7 not written" in caplog.text and "no node left" in caplog.text
    assert writer.rows == 8 and writer.failed == 1


def test_a_block_lost_for_good_is_named_and_the_rest_is_written(tmp_path, store, caplog):
    parts, ids = append(store, broken.remote())
    writer = JournalWriter(tmp_path / "journal", LOG)
    writer.between_waits = lambda: None
    with caplog.at_level(logging.WARNING, LOG.name):
        writer.write(store, parts, ids)  # no raise: the launch goes on
    assert sorted(written(tmp_path / "journal")) == [(0, 3), (8, 11)]
    assert "ids 4…7 not written" in caplog.text


def test_an_append_read_whole_is_one_file(tmp_path, store):
    parts, ids = append(store, ray.put(rows_for(np.arange(4, 8))[KEYS[0]]))
    writer = JournalWriter(tmp_path / "journal", LOG)
    writer.between_waits = lambda: pytest.fail("no wait needed for blocks already there")
    writer.write(store, parts, ids)
    assert sorted(written(tmp_path / "journal")) == [(0, 11)]
    assert writer.appends == 1 and writer.rows == 12 and not writer.failed
