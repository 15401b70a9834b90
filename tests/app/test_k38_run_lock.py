"""K38: one writer per run folder — the run's lock (``RUN/.kestrel.lock``), without Ray.

Processes racing for one new folder: exactly one gets it and the others are refused naming it;
a lock left by a killed holder is taken over with a note naming it; a clean release leaves
nothing behind; a file system without locks goes on without one, saying so; ``kestrel.launch``
on a held run is refused before it writes anything; sampling's findings never go into the
launch's ``status.json``.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import warnings

import pytest

from kestrel.rundir import _lock
from kestrel.rundir._folder import folder_kind
from kestrel.rundir._lock import LOCK_FILE, RunLock, RunLockedError, read_holder
from kestrel.rundir._rundir import RunDir

_CONTENDERS = 3
_ROUNDS = 4


def _contend(roots, start, attempted, results):
    """One contender (a process of its own): in each round, lock ``roots[i]`` at the same
    instant as the others; hold it until every contender has tried."""
    for root in roots:
        start.wait(timeout=60)
        lock = RunLock(root)
        try:
            lock.acquire()
        except RunLockedError as err:
            results.put(("lost", os.getpid(), root, str(err)))
        else:
            results.put(("won", os.getpid(), root, ""))
        attempted.wait(timeout=60)  # the winner still holds it while the others try
        lock.release()


def test_k38_processes_racing_for_a_new_folder_exactly_one_wins(tmp_path):
    roots = [str(tmp_path / f"round{i}" / "runs" / "r") for i in range(_ROUNDS)]  # none exist
    ctx = multiprocessing.get_context("spawn")
    start, attempted = ctx.Barrier(_CONTENDERS), ctx.Barrier(_CONTENDERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_contend, args=(roots, start, attempted, results))
        for _ in range(_CONTENDERS)
    ]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=120) for _ in range(_CONTENDERS * _ROUNDS)]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    host = socket.gethostname()
    for root in roots:
        here = [r for r in got if r[2] == root]
        winners = [pid for kind, pid, _, _ in here if kind == "won"]
        assert len(winners) == 1, here  # exactly one per folder
        for kind, _, _, message in here:
            if kind == "lost":  # one line naming the holder: host, pid, start
                assert "\n" not in message
                assert f"pid {winners[0]} on host {host}, started " in message, message
                assert root in message and "another launch" in message
        # released cleanly: no lock file, and the folders the winner created are gone again
        assert not os.path.exists(os.path.join(root, LOCK_FILE))
    # the folders the launches made are removed by whichever released last; in a tight race a
    # loser may create a folder (or a lock file that it then removes) after the winner's
    # clean-up looked: what may be left is an empty folder, never a file
    assert all(not os.path.exists(root) or not os.listdir(root) for root in roots)


_HOLD = """
import sys, time
from kestrel.rundir._lock import RunLock
lock = RunLock(sys.argv[1], command="kestrel launch -o RUN (test)").acquire()
print("locked", flush=True)
time.sleep(600)
"""


def test_k38_a_lock_left_by_a_killed_holder_is_taken_over_with_a_note(tmp_path):
    root = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=rf"pid {holder.pid} on host .*kestrel launch"):
            RunLock(root).acquire()
        assert read_holder(root).pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)  # never releases: the file stays, the OS lock goes
        holder.wait(timeout=60)
        holder.stdout.close()
    assert (root / LOCK_FILE).is_file()
    with RunLock(root) as lock:
        assert lock.locked and lock.previous.pid == holder.pid
        (note,) = lock.notes
        assert "did not release" in note and f"pid {holder.pid}" in note and "\n" not in note
        assert read_holder(root).pid == os.getpid()  # the file names the new holder
    assert not (root / LOCK_FILE).exists()
    assert root.is_dir()  # it was not created by the last holder: left in place


def test_k38_lock_file_content_release_and_a_second_lock_in_one_process(tmp_path):
    root = tmp_path / "a" / "run"
    lock = RunLock(root, command="kestrel launch -c m/config.yml -o R --seed 2").acquire()
    try:
        data = json.loads((root / LOCK_FILE).read_text())
        assert data["pid"] == os.getpid() and data["host"] == socket.gethostname()
        assert data["started"] and data["command"].startswith("kestrel launch -c m/config.yml")
        assert lock.holds() and lock.locked and lock.notes == []
        assert folder_kind(root) == "empty"  # a hidden lock file: not a folder of files
        with pytest.raises(RunLockedError) as err:  # another open file: refused, also here
            RunLock(root).acquire()
        assert "`kestrel launch -c m/config.yml -o R --seed 2`" in str(err.value)
        # --restart moves the run's own contents, never the lock
        (root / "run.json").write_text('{"launches": []}')
        RunDir(root).archive()
        assert (root / LOCK_FILE).is_file() and (root / "previous" / "1" / "run.json").is_file()
    finally:
        lock.release()
        lock.release()  # a second release does nothing
    assert not (root / LOCK_FILE).exists() and not lock.holds()
    assert root.is_dir()  # not empty (previous/): kept
    empty = tmp_path / "b" / "c"
    with RunLock(empty):
        assert empty.is_dir()
    assert not (tmp_path / "b").exists()  # the folders it created, empty again: removed


def test_k38_a_file_system_without_locks_goes_on_without_one_and_says_so(tmp_path, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(_lock.fcntl, "flock", no_locks)
    root = tmp_path / "run"
    with RunLock(root) as lock:
        assert lock.holds() and not lock.locked
        (note,) = lock.notes
        assert "No locks available" in note and "WITHOUT a lock" in note
        assert not (root / LOCK_FILE).exists()
    assert not root.exists()


def test_k38_launch_on_a_held_run_is_refused_before_writing(tmp_path):
    from kestrel import launch

    root = tmp_path / "run"
    with RunLock(root, command="kestrel launch -o RUN"):
        before = sorted(os.listdir(root))
        with pytest.raises(RunLockedError, match=rf"pid {os.getpid()} on host"):
            launch({"graph": {}}, root)  # refused before the config is even read
        assert sorted(os.listdir(root)) == before == [LOCK_FILE]


def test_k38_sampling_records_its_findings_without_touching_status_json(tmp_path):
    from kestrel.sample._guards import read_checks, record
    from kestrel_core import ObservationWarning

    run = RunDir(tmp_path / "run")
    os.makedirs(run.samples)
    status = b'{"status": "running", "seed": 3}\n'
    (tmp_path / "run" / "status.json").write_bytes(status)
    path = os.path.join(run.samples, "posterior", "abc", "000000.npz")
    found = [{"node": "theta", "kind": "far", "label": "x[0]"}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record(run, path, "posterior", "abc", [ObservationWarning("far", found)])
    assert (tmp_path / "run" / "status.json").read_bytes() == status  # the launch's file
    assert read_checks(run)["posterior/abc"]["findings"] == found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record(run, path, "posterior", "abc", [])  # a clean call removes the entry
    assert read_checks(run) == {}
    assert (tmp_path / "run" / "status.json").read_bytes() == status


def test_k38_sampling_before_a_running_launch_checkpointed_says_to_wait(tmp_path):
    import kestrel
    from kestrel_core import EstimatorError
    from tests.app.test_k41_run_folder_trust import handed_over
    from tests.core.model_folders import GAUSSIAN

    _, run = handed_over(tmp_path, estimator=GAUSSIAN)
    with pytest.raises(EstimatorError, match=r"run `kestrel launch -o "):
        kestrel.sample_run(run, "posterior", n=3)
    with RunLock(run):  # a launch of the run, before its first checkpoint
        with pytest.raises(EstimatorError) as err:
            kestrel.sample_run(run, "posterior", n=3)
    text = str(err.value)
    assert f"the run's lock names a launch (pid {os.getpid()} on host" in text
    assert "first checkpoint (every 60 s)" in text
