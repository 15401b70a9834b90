"""K37: a full disk is a fault like any other (issue 30, item 1).

The run folder lies on an 8 MiB tmpfs (mounted by ``tests/faults/diskfull.py`` in a mount
namespace of its own, ``unshare --mount``: nothing of it outlives the test), a node of 1 024
floats a sample. For each kind of write — the journal, a checkpoint's ``buffer.npz``, the
posterior sample file, the final ``status.json`` — the disk is full when that write comes;
the launch must stop once: exit status 1 with one line naming the file and the space left, no
``--- Logging error ---``, no ``.tmp`` left, ``status.json`` ``failed`` with that reason (or,
when not even it can be written, said on stderr); then, space freed, ``kestrel launch -o RUN
--epochs 1`` continues with every row that was on disk (snapshot and journal): 0 stored rows
lost beyond the failed write.

One subprocess runs the four launches and their resumes on one Ray (≈ 100 s). Skipped where
mounting a tmpfs is not permitted (not root, no ``unshare``, a container without
``CAP_SYS_ADMIN``): probed once.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys

import pytest

from ..integration.helpers import REPO, kestrel_env

KINDS = ("journal", "checkpoint", "sample", "status")

pytestmark = pytest.mark.faults


@functools.cache
def _mount_problem() -> str | None:
    """Why a tmpfs cannot be mounted in a new mount namespace here (``None``: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d; rc=$?; rmdir $d; exit $rc"
    try:
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", probe], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare --mount failed: {err}"
    if done.returncode != 0:
        return f"mounting a tmpfs is not permitted here: {done.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory) -> dict[str, dict]:
    """The facts of each kind's failed launch and resume (``tests/faults/diskfull.py``)."""
    problem = _mount_problem()
    if problem:
        pytest.skip(problem)
    work = tmp_path_factory.mktemp("k37")
    done = subprocess.run(
        ["unshare", "--mount", sys.executable, "-m", "tests.faults.diskfull", str(work), *KINDS],
        cwd=str(REPO),
        env=kestrel_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {kind: json.loads((work / f"{kind}.json").read_text()) for kind in KINDS}


#: the file each kind's write names
FILES = {
    "journal": "/buffer/journal/",
    "checkpoint": "/buffer/snapshots/buffer.npz",
    "sample": "/samples/posterior/",
    "status": "/status.json",
}


@pytest.mark.parametrize("kind", KINDS)
def test_k37_a_full_disk_stops_the_launch_once_and_the_run_resumes(full_disk, kind):
    facts = full_disk[kind]
    # one line naming the file and the space left; exit status 1
    assert facts["rc"] == 1, facts
    errors = [line for line in facts["stderr"] if line.startswith("kestrel launch: error:")]
    assert len(errors) == 1, facts["stderr"]
    assert FILES[kind] in errors[0] and "No space left on device" in errors[0], errors
    assert "free there" in errors[0] and "kestrel launch -o" in errors[0], errors
    # no logging-error flood, no retry storm, no .tmp left
    assert facts["logging_errors"] == 0, facts
    assert facts["stdout_lines"] < 60, facts["stdout_tail"]
    assert len(facts["stderr"]) <= 4, facts["stderr"]
    assert facts["tmp"] == [], facts["tmp"]
    # the free-space check said before the launch wrote that a checkpoint may not fit
    assert facts["disk_note"] and "free" in facts["disk_note"][0], facts
    if kind == "status":  # not even status.json could be written: said on stderr
        assert any("status.json not updated to 'failed'" in line for line in facts["stderr"])
    else:
        assert facts["status"] == "failed", facts
        assert FILES[kind] in facts["reason"] and "free there" in facts["reason"], facts
    # every row on disk is a contiguous id range from 0 (nothing lost before the failed
    # write); the journal's failed write is the next ids
    count, first, last = facts["ids"]
    assert count > 0 and first == 0 and last == count - 1, facts["ids"]
    if kind == "journal":
        assert f"/buffer/journal/{count}-" in errors[0], (errors, facts["ids"])
    # space freed: the run continues with every row that was on disk
    assert facts["resume_rc"] == 0, facts["resume_stderr"]
    assert facts["resume_status"] == "completed", facts
    assert facts["lost"] == 0, facts
    assert any("restored" in line or "journal:" in line for line in facts["resume_log"]), facts
