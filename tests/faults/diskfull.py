"""K37's launches on a full disk, run inside ``unshare --mount`` (see test_k37_disk_full.py).

``python -m tests.faults.diskfull WORK KIND [KIND ...]`` mounts an 8 MiB tmpfs at
``WORK/disk`` (in this process's own mount namespace: it goes away with the process), starts
one local Ray and, for each KIND, runs ``kestrel launch`` (``kestrel.cli.main`` in this
process, its stdout and stderr captured) on a run folder on that disk until a write of that
kind finds the disk full:

* ``journal``: rows of 1 024 floats fill the disk; the journal's write fails first (the
  checkpoint comes every 60 s);
* ``checkpoint``: a checkpoint every 0.5 s; the disk (grown to 256 MiB first, so that the
  journal, which keeps every row, does not fill it before) is filled (64 KiB left) right
  before the third checkpoint's buffer write (so for ``sample`` and ``status``);
* ``sample``: training ends by itself; the disk is filled (64 KiB left) right before the
  posterior sample file is written;
* ``status``: the disk is filled to the last byte right before the final ``status.json`` of a
  completed launch (then nothing else can be written either).

Then it records what is on disk (``status.json``, ``.tmp`` files, the ids of the buffer
snapshot and the journal), frees space (the filler removed, the tmpfs grown to 256 MiB) and
resumes the run with ``kestrel launch -o RUN --epochs 1``, recording the ids of the buffer it
saves. The facts go to ``WORK/<KIND>.json`` for the test to check.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tests.faults.faultkit import FOREVER, MODELS, toy

MIB = 2**20


def mount(disk: Path, size: str) -> None:
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], check=True)


def grow(disk: Path) -> None:
    """Free space: the filler goes, the tmpfs grows to 256 MiB."""
    with contextlib.suppress(FileNotFoundError):
        (disk / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,size=256m", str(disk)], check=True)


def fill(disk: Path, leave: int) -> None:
    """Write a filler file until at most ``leave`` bytes are free on ``disk``."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for chunk in (MIB, 64 * 1024, 4096):
            while shutil.disk_usage(disk).free - chunk >= leave:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)


def config(folder: Path, kind: str) -> Path:
    """:func:`~tests.faults.faultkit.toy` with x of 1 024 floats a sample (8 KiB, dry-run, so
    the launch knows a checkpoint's size before it writes)."""
    forever = kind in ("journal", "checkpoint")
    x = {"_target_": f"{MODELS}.Megabyte", "width": 1024}
    cfg = toy(folder, x, epochs=FOREVER if forever else 2, max_samples=100_000)
    np.save(folder / "obs.npy", np.full(1024, 0.5))
    cfg["graph"]["x"]["dry_run"] = True
    cfg["sample"]["posterior"]["n"] = 20_000 if kind == "sample" else 5
    path = folder / f"{kind}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def kestrel(*args: str) -> tuple[int, str, str]:
    """``kestrel ARGS`` in this process: exit status, stdout, stderr."""
    from kestrel.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def fill_before(owner: Any, name: str, disk: Path, when: Any, *, leave: int):
    """Fill ``disk`` (``leave`` bytes left) right before the first call of ``owner.name`` (a
    method) for which ``when(number of the call, its arguments)`` holds; put it back on exit.
    Yields ``[calls]``."""
    original = getattr(owner, name)
    calls, filled = [0], [False]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if not filled[0] and when(calls[0], args):
            filled[0] = True
            fill(disk, leave)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    try:
        yield calls
    finally:
        setattr(owner, name, original)


def ids_on_disk(run: Path) -> list[int]:
    """The ids of the buffer snapshot and of the journal's complete files."""
    from kestrel_core.store import journal_files, read_journal_file

    ids: set[int] = set()
    snapshot = run / "buffer" / "snapshots" / "buffer.npz"
    if snapshot.exists():
        with np.load(snapshot, allow_pickle=False) as data:
            ids.update(int(i) for i in data["_ids"])
    for file in journal_files(run / "buffer" / "journal"):
        if file.complete:
            ids.update(int(i) for i in read_journal_file(file).ids)
    return sorted(ids)


def one(work: Path, disk: Path, kind: str) -> dict[str, Any]:
    import kestrel.persist._checkpoint as checkpoint
    from kestrel.rundir._rundir import RunDir

    run = disk / kind
    cfg = config(work, kind)
    launch = ["launch", "-c", str(cfg), "-o", str(run), "--seed", "3", "--timeout", "90"]
    checkpoint.CHECKPOINT_EVERY = 60.0 if kind == "journal" else 0.5
    if kind != "journal":
        # the journal keeps every row (the run's simulation bank), so on 8 MiB it would fill
        # the disk itself before the write under test: room enough until the injected fill
        grow(disk)
    injected: contextlib.AbstractContextManager[Any] = contextlib.nullcontext([0])
    if kind == "checkpoint":  # the third checkpoint that writes the buffer
        injected = fill_before(
            checkpoint.Checkpoint, "save_buffer", disk, lambda n, _: n == 3, leave=64 * 1024
        )
    elif kind == "sample":
        injected = fill_before(RunDir, "write_samples", disk, lambda n, _: True, leave=64 * 1024)
    elif kind == "status":  # the final status of a completed launch
        injected = fill_before(
            RunDir, "write_status", disk, lambda n, a: a[1].get("status") == "completed", leave=0
        )
    with injected as calls:
        rc, out, err = kestrel(*launch)
    status = json.loads((run / "status.json").read_text())
    tmp = [
        str(p.relative_to(run))
        for p in run.rglob("*")
        if p.name.endswith(".tmp") or p.name.startswith(".tmp-")
    ]
    before = ids_on_disk(run)
    facts: dict[str, Any] = {
        "rc": rc,
        "calls": calls[0],
        "stderr": err.strip().splitlines(),
        "stdout_lines": len(out.splitlines()),
        "logging_errors": (out + err).count("--- Logging error ---"),
        "status": status.get("status"),
        "reason": status.get("reason"),
        "tmp": tmp,
        "ids": [len(before), before[0] if before else None, before[-1] if before else None],
        "disk_note": [line for line in out.splitlines() if line.startswith("disk:")],
        "stdout_tail": out.splitlines()[-12:],
    }
    grow(disk)
    checkpoint.CHECKPOINT_EVERY = 60.0
    rc2, out2, err2 = kestrel("launch", "-o", str(run), "--epochs", "1", "--seed", "3")
    after = set(ids_on_disk(run))
    facts.update(
        resume_rc=rc2,
        resume_status=json.loads((run / "status.json").read_text()).get("status"),
        resume_stderr=err2.strip().splitlines()[-5:],
        lost=len(set(before) - after),
        resume_log=[
            line for line in out2.splitlines() if re.search(r"resume|restor|journal", line)
        ][:8],
    )
    return facts


def main(argv: list[str]) -> int:
    work, kinds = Path(argv[0]), argv[1:]
    disk = work / "disk"
    mount(disk, "8m")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    from kestrel_ray import init_ray

    init_ray(num_cpus=2, log_to_driver=False)
    try:
        for kind in kinds:
            facts = one(work, disk, kind)
            (work / f"{kind}.json").write_text(json.dumps(facts, indent=1))
            shutil.rmtree(disk / kind, ignore_errors=True)
            subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
    finally:
        import ray

        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
