"""K37 without a tmpfs: each writer of a run meets ``OSError(ENOSPC)`` at its Nth write.

The low-level write inside the helpers (``numpy.lib.format.write_array`` for ``.npz`` files,
``os.fsync``/``os.write`` for the others) raises, so the helpers' own handling runs: one
``DiskFullError`` naming the file and the space left, the ``.tmp`` removed, the old file and
every complete file before it kept; the run's log handler stops after its first failure
instead of a ``--- Logging error ---`` per record. The real full disk (a tmpfs, every kind of
write, then a resume) is tests/faults/test_k37_disk_full.py.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kestrel.cli import main
from kestrel.controller._failure import disk_full, save_on_failure
from kestrel.persist._checkpoint import Checkpoint
from kestrel.preflight._capacity import check_disk_space
from kestrel.report._logging import RunFileHandler
from kestrel.report._nodelog import NodeLogSink
from kestrel.rundir._rundir import RunDir
from kestrel_core import KestrelError
from kestrel_core.internal import DiskFullError, as_disk_full, save_npz, write_atomic
from kestrel_core.store import journal_files, read_journal_file, write_journal


def _enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fail_at(monkeypatch, owner, name, nth: int):
    """Make ``owner.name`` raise ENOSPC from its ``nth`` call on (a full disk stays full)."""
    original = getattr(owner, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        if calls[0] >= nth:
            _enospc()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def _leftovers(folder) -> list[str]:
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.name.endswith(".tmp") or p.name.startswith(".tmp-")
    )


def test_k37_disk_full_error_is_one_line_naming_the_file_and_the_space(tmp_path):
    err = as_disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "f.npz")
    assert isinstance(err, DiskFullError) and isinstance(err, OSError)
    assert isinstance(err, KestrelError)
    text = str(err)
    assert "\n" not in text and str(tmp_path / "f.npz") in text and "free there" in text
    assert err.errno == errno.ENOSPC and err.filename == str(tmp_path / "f.npz")
    assert as_disk_full(OSError(errno.EACCES, "denied"), tmp_path) is None
    assert as_disk_full(OSError(errno.EROFS, "read-only"), tmp_path).errno == errno.EROFS
    err.remedy = "free space"
    assert str(err).endswith("; free space")
    import pickle

    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)


def test_k37_write_atomic_keeps_the_old_file_and_leaves_no_tmp(tmp_path, monkeypatch):
    path = tmp_path / "status.json"
    write_atomic(path, b"old")
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(DiskFullError, match="status.json"):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_k37_save_npz_keeps_the_old_file_and_leaves_no_tmp(tmp_path, monkeypatch):
    path = save_npz(tmp_path / "buffer.npz", {"x": np.arange(3)})
    _fail_at(monkeypatch, np.lib.format, "write_array", 1)
    with pytest.raises(DiskFullError, match="buffer.npz"):
        save_npz(path, {"x": np.arange(5)}, durable=True)
    with np.load(path) as data:
        assert data["x"].tolist() == [0, 1, 2]
    assert _leftovers(tmp_path) == []


def test_k37_the_journal_stops_at_the_failed_write_and_keeps_the_files_before(
    tmp_path, monkeypatch
):
    folder = tmp_path / "journal"
    rows = {"x": np.ones((4, 3))}
    write_journal(folder, np.arange(0, 4), rows)
    # the second append's file is cut short by the full disk (3 arrays + ids/valid/sizes)
    _fail_at(monkeypatch, np.lib.format, "write_array", 2)
    with pytest.raises(DiskFullError, match="4-7.npz"):
        write_journal(folder, np.arange(4, 8), rows)
    monkeypatch.undo()  # space freed
    files = journal_files(folder)
    assert [(f.first, f.last, f.complete) for f in files] == [(0, 3, True)]
    assert read_journal_file(files[0]).n == 4
    write_journal(folder, np.arange(4, 8), rows)
    assert [(f.first, f.last) for f in journal_files(folder)] == [(0, 3), (4, 7)]


def test_k37_the_journal_writer_raises_a_full_disk_instead_of_logging_on(tmp_path, monkeypatch):
    from kestrel.persist._journal import JournalWriter
    from kestrel_core import BlockMeta

    arrays = {"x": np.ones((4, 2))}
    store = SimpleNamespace(wait=lambda refs: [arrays["x"] for _ in refs])
    blocks = [({"x": "ref"}, BlockMeta.of(arrays, 4))]
    log = logging.getLogger("k37-test")
    writer = JournalWriter(tmp_path / "journal", log)
    writer.write(store, blocks, np.arange(0, 4))
    _fail_at(monkeypatch, np.lib.format, "write_array", 1)
    with pytest.raises(DiskFullError):
        writer.write(store, blocks, np.arange(4, 8))
    assert writer.appends == 1 and writer.failed == 1
    assert _leftovers(tmp_path) == []


def test_k37_a_checkpoint_that_finds_the_disk_full_stops_the_launch(tmp_path):
    class Resume:
        def save_buffer(self, dg, quiet=False):
            raise DiskFullError(tmp_path / "buffer.npz", 0)

    checkpoint = Checkpoint(Resume(), logging.getLogger("k37-test"), every=0.0)
    with pytest.raises(DiskFullError, match="buffer.npz"):
        checkpoint.maybe(None, {}, {"rows": 1})


def test_k37_status_and_sample_files_raise_one_error_and_leave_no_tmp(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    run.write_status({"status": "running"})
    monkeypatch.setattr(os, "replace", _enospc)  # status.json is not fsynced: its rename fails
    with pytest.raises(DiskFullError, match="status.json"):
        run.write_status({"status": "failed"})
    monkeypatch.undo()
    assert json.loads(Path(run.status_file).read_text()) == {"status": "running"}
    _fail_at(monkeypatch, np.lib.format, "write_array", 1)
    with pytest.raises(DiskFullError, match="prior"):
        run.write_samples("prior", {"z": np.ones((5, 2))})
    assert _leftovers(tmp_path) == []


def test_k37_the_run_log_stops_once_on_a_full_disk(tmp_path, capsys):
    handler = RunFileHandler(tmp_path / "output.log")
    log = logging.getLogger("k37-test-log")
    log.propagate = False
    log.addHandler(handler)
    try:
        log.warning("written")
        handler.stream.write = _enospc  # the disk is full from here on
        for i in range(200):
            log.warning("record %d", i)
    finally:
        log.removeHandler(handler)
        handler.close()
    err = capsys.readouterr().err
    assert "--- Logging error ---" not in err
    assert err.count("the log file is no longer written") == 1, err
    assert "output.log" in err and "No space left on device" in err
    assert handler.failed is not None
    assert (tmp_path / "output.log").read_text().count("written") == 1


def test_k37_node_logs_stop_once_on_a_full_disk(tmp_path, monkeypatch, capsys):
    import kestrel.report._nodelog as nodelog

    sink = NodeLogSink({}, lambda node: str(tmp_path), [])
    monkeypatch.setattr(nodelog, "open", _enospc, raising=False)
    for _ in range(50):
        sink._append(str(tmp_path / "output.log"), ["a line"])
    err = capsys.readouterr().err
    assert err.count("node logs are no longer written") == 1 and "output.log" in err


def test_k37_the_failure_path_names_the_remedy_and_finds_the_cause(tmp_path):
    full = DiskFullError(tmp_path / "run" / "status.json", 0)
    resume = SimpleNamespace(
        log=logging.getLogger("k37-test"),
        session=SimpleNamespace(run=RunDir(tmp_path / "run")),
    )
    assert save_on_failure(None, resume, full) == {}  # nothing deployed: nothing saved
    assert "kestrel launch -o" in str(full) and str(tmp_path / "run") in str(full)
    try:
        try:
            raise full
        except DiskFullError as err:
            raise KestrelError("wrapped") from err
    except KestrelError as outer:
        assert disk_full(outer) is full
    assert disk_full(ValueError("other")) is None


def test_k37_free_space_check_warns_and_refuses(tmp_path):
    buffer = SimpleNamespace(max_samples=1000, min_samples=64, validation_samples=16)
    per_sample = {"x": 8192, "z": 16}
    assert check_disk_space(str(tmp_path), buffer, per_sample, free=2**34) is None
    note = check_disk_space(str(tmp_path), buffer, per_sample, free=2**23)
    assert note and str(tmp_path) in note and "8 MiB free" in note and "needs about" in note
    with pytest.raises(DiskFullError, match="not enough space") as refused:
        check_disk_space(str(tmp_path), buffer, per_sample, free=100_000)
    assert str(tmp_path) in str(refused.value) and "free there" in str(refused.value)
    assert check_disk_space(str(tmp_path), buffer, {}, free=0) is None  # nothing measured


def test_k37_cli_says_a_full_disk_in_one_line(tmp_path, monkeypatch, capsys):
    import yaml

    config = tmp_path / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "graph": {
                    "z": {
                        "simulator": {
                            "_target_": "kestrel_core.Product",
                            "priors": [["uniform", 0.0, 1.0]] * 2,
                        }
                    }
                }
            }
        )
    )
    _fail_at(monkeypatch, np.lib.format, "write_array", 1)
    out = tmp_path / "out.npz"
    assert main(["simulate", "-c", str(config), "-n", "5", "-o", str(out), "--seed", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("kestrel simulate: error: cannot write") and "out.npz" in err[0]
    assert _leftovers(tmp_path) == []
