"""The estimator node's actor or the store actor killed while a launch trains (issue 11, item 1).

Neither is restarted (a fresh estimator or store would silently drop the training state or
the buffer's statuses): the launch stops within seconds with an error naming what died. What
it leaves is a run ``kestrel launch -o RUN`` continues:

* estimator killed: the store still answers, so the failure path writes the whole buffer; the
  dead node's weights on disk are the last checkpoint's (written about once a minute while
  training — every 0.3 s here);
* store killed (stop cleanly rather than rebuild: the statuses and the validation split live
  in the store): the failure path writes the live estimator's weights; the buffer on disk is
  the last checkpoint's, whole, and the journal (``RUN/buffer/journal/``) holds every append
  since; ``kestrel launch -o RUN`` puts both back: every row that reached the store before the
  kill is in the resumed store, same id, same values (0 lost).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import ray

import kestrel.persist._checkpoint as _checkpoint
from kestrel import launch
from kestrel_core import KestrelError
from kestrel_core.store import journal_files, read_buffer_file, read_journal_file
from kestrel_ray.store._handle import StoreHandle

from .faultkit import (
    FOREVER,
    Killer,
    actor_pid,
    buffer_file,
    checkpointed,
    contiguous,
    driver_log,
    journaled_beyond,
    status,
    store_pid,
    toy,
)

pytestmark = pytest.mark.faults

#: seconds from the kill to the launch's error
DETECT_WITHIN = 15.0


@pytest.fixture
def fast_checkpoints(monkeypatch):
    monkeypatch.setattr(_checkpoint, "CHECKPOINT_EVERY", 0.3)


class Reached:
    """Every row whose append the store confirmed to the driver (its id and values), read by a
    spy on :class:`StoreHandle` — apart from the journal it checks."""

    def __init__(self, monkeypatch):
        self.rows: dict[str, dict[int, np.ndarray]] = {}
        self.on = True
        sent: dict = {}
        submit, appended = StoreHandle.submit_append, StoreHandle.appended

        def spy_submit(handle, blocks):
            ref = submit(handle, blocks)
            sent[ref] = [dict(block) for block, _ in blocks]
            return ref

        def spy_appended(handle, ref):
            done = appended(handle, ref)
            blocks = sent.pop(ref, [])
            if self.on and blocks:
                keys = sorted(blocks[0])
                values = ray.get([b[k] for b in blocks for k in keys])
                for key_index, key in enumerate(keys):
                    arrays = np.concatenate(values[key_index :: len(keys)])
                    self.rows.setdefault(key, {}).update(zip(done.ids.tolist(), arrays))
            return done

        monkeypatch.setattr(StoreHandle, "submit_append", spy_submit)
        monkeypatch.setattr(StoreHandle, "appended", spy_appended)

    @property
    def ids(self) -> list[int]:
        return sorted(next(iter(self.rows.values()), {}))

    def lost_in(self, saved: dict[str, np.ndarray]) -> list[int]:
        """The ids reached whose row is not in ``saved`` (a buffer.npz) with the same values."""
        where = {int(i): r for r, i in enumerate(saved["_ids"])}
        lost = []
        for i in self.ids:
            r = where.get(i)
            if r is None or any(
                not np.array_equal(saved[key][r], rows[i]) for key, rows in self.rows.items()
            ):
                lost.append(i)
        return lost


def saved_epoch(run) -> int:
    return int(json.loads((run / "graph" / "z" / "saved.json").read_text())["epoch"])


def weights_epoch(run) -> int:
    """The epoch count inside the node's saved weights (``estimator.pt``)."""
    from kestrel_torch.checkpoint._state import from_bytes, read_checkpoint

    payload = from_bytes(read_checkpoint(run / "graph" / "z" / "estimator.pt"), "cpu")
    return int(payload["total_epochs"])


def continues(run, before_rows: int) -> None:
    """``kestrel launch -o RUN --epochs 1`` continues from what is on disk."""
    epoch, weights = saved_epoch(run), weights_epoch(run)
    # saved.json of a checkpoint taken mid-training names the epoch of the status poll that
    # precedes the weights' bytes: the weights may have trained a few epochs more (small
    # epochs: 4 were seen), never fewer
    assert epoch <= weights
    # the test's own run: its simulator writes batch files, refused from an untrusted run
    result = launch(None, run, seed=3, progress=False, epochs=1, auto_sample=False, trust=True)
    assert result.status == "completed" and result.resumed == ["z"]
    assert result.epochs["z"] == weights + 1
    log = driver_log(run)
    assert f"buffer restored from {run / 'buffer' / 'snapshots' / 'buffer.npz'}" in log
    assert "initial simulation: 0 samples from the prior" in log
    assert len(buffer_file(run)["_ids"]) >= before_rows


def test_a_killed_estimator_actor_stops_the_run_resumable(
    tmp_path, fast_checkpoints, no_leaked_actors
):
    run = tmp_path / "run"
    killer = Killer(checkpointed(run, epochs=2), lambda: actor_pid(run, "z"))
    with pytest.raises(KestrelError) as info:  # the training call's or a proposal call's error
        launch(toy(tmp_path, epochs=FOREVER, max_samples=100_000), run, seed=1, progress=False)
    detected = time.monotonic() - killer.killed_at
    assert killer.error is None and detected < DETECT_WITHIN, detected
    print(f"estimator actor killed: the launch raised {detected:.2f} s later")  # RELIABILITY.md
    assert "node 'z'" in str(info.value)
    st = status(run)
    assert st["status"] == "failed" and "node 'z'" in st["reason"]
    log = driver_log(run)
    assert "failure: buffer snapshot saved" in log  # by the failure path: the store answers
    assert "failure: node 'z''s actor is gone; its weights on disk are those saved after" in log
    saved = buffer_file(run)
    assert contiguous(saved["_ids"]) and int(saved["_next_id"]) == len(saved["_ids"])
    assert saved_epoch(run) >= 2  # a checkpoint's weights
    continues(run, len(saved["_ids"]))


def test_a_killed_store_actor_stops_the_run_cleanly_and_loses_no_row(
    tmp_path, fast_checkpoints, no_leaked_actors, monkeypatch
):
    run = tmp_path / "run"
    reached = Reached(monkeypatch)
    checkpoint = checkpointed(run, epochs=2)

    ready = journaled_beyond(run, checkpoint)  # a checkpoint, and appends only the journal holds

    killer = Killer(ready, store_pid)
    with pytest.raises(KestrelError) as info:
        launch(toy(tmp_path, epochs=FOREVER, max_samples=100_000), run, seed=2, progress=False)
    detected = time.monotonic() - killer.killed_at
    assert killer.error is None and detected < DETECT_WITHIN, detected
    print(f"store actor killed: the launch raised {detected:.2f} s later")  # RELIABILITY.md
    assert "store" in str(info.value)
    assert status(run)["status"] == "failed"
    log = driver_log(run)
    assert "failure: the buffer snapshot was not written" in log
    assert "the last checkpoint's snapshot stays" in log
    assert "failure: weights saved for {'z'" in log  # the estimator outlived the store
    # what a resume reads (the test above continues such a run): the checkpoint's buffer, whole
    snapshot = read_buffer_file(run / "buffer" / "snapshots")
    assert snapshot is not None and snapshot.statuses is not None
    assert contiguous(snapshot.ids) and snapshot.next_id == snapshot.n
    assert saved_epoch(run) >= 2
    # the rows appended after that checkpoint are in the journal, nowhere else
    reached.on = False
    journal = sorted((run / "buffer" / "journal").glob("*.npz"))
    beyond = [i for i in reached.ids if i >= snapshot.next_id]
    print(f"store actor killed: {len(beyond)} rows after the last checkpoint, {len(journal)} files")
    assert reached.ids == list(range(len(reached.ids)))
    # continue: snapshot + journal back, every row the store confirmed, same id and values
    result = launch(None, run, seed=3, progress=False, epochs=1, auto_sample=False, trust=True)
    assert result.status == "completed" and result.resumed == ["z"]
    log = driver_log(run)
    assert beyond and f"journal: {len(beyond)} rows" in log
    saved = buffer_file(run)
    assert reached.lost_in(saved) == []  # 0 lost
    assert contiguous(saved["_ids"])  # none twice, no gap
    # the journal is the run's bank: it keeps every row stored, also those the snapshot holds
    banked = set()
    for file in journal_files(run / "buffer" / "journal"):
        banked.update(int(i) for i in read_journal_file(file).ids)
    assert set(int(i) for i in saved["_ids"]) <= banked
