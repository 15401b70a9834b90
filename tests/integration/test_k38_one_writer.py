"""K38: one writer per run folder, with the ``kestrel`` command as a user runs it.

A second ``kestrel launch`` of a run that a launch is writing — a resume with ``--epochs`` or a
fresh ``launch -c … -o RUN`` — is refused at once in one line naming the holder (host, pid,
start) and writes nothing; ``kestrel sample`` beside the running launch works; ``run.json``
holds exactly one entry per launch that ran. Two fresh launches of one new folder started
together: exactly one runs.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess

from kestrel.rundir._lock import LOCK_FILE

from .helpers import KESTREL, REPO, example, kestrel_env, run_kestrel, tiny
from .test_cli import FOREVER, start_launch, wait_for_epoch

HELD = "is being written by another launch"


def _refusal(done: subprocess.CompletedProcess, pid: int) -> str:
    """The one line of a launch refused by the lock held by ``pid``."""
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if HELD in line]
    assert len(lines) == 1, done.stderr
    assert f"pid {pid} on host {socket.gethostname()}, started " in lines[0], lines[0]
    assert "kestrel launch" in lines[0]  # the holder's command
    assert "kestrel launch: " not in done.stdout  # it never ran
    return lines[0]


def _launches(run) -> list[dict]:
    return json.loads((run / "run.json").read_text())["launches"]


def test_k38_a_second_launch_of_a_running_run_is_refused_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    config = example("01_minimal")
    done = run_kestrel("launch", "-c", config, "-o", run, "--seed", "1", *tiny(config, epochs=2))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (run / LOCK_FILE).exists()  # released at the end

    proc = start_launch(run, "--resume", *FOREVER)  # trains until stopped
    try:
        wait_for_epoch(proc, run, 4)
        holder = json.loads((run / LOCK_FILE).read_text())
        assert holder["pid"] == proc.pid and holder["host"] == socket.gethostname()
        assert "launch" in holder["command"] and holder["started"]

        # the resume of the issue: it restored the other's checkpoint, trimmed its journal and
        # recorded `completed` while the other still ran
        again = run_kestrel("launch", "-o", run, "--epochs", "3")
        _refusal(again, proc.pid)
        # a fresh launch of the same folder with the same config and another seed
        fresh = run_kestrel("launch", "-c", config, "-o", run, "--seed", "3", *tiny(config))
        _refusal(fresh, proc.pid)
        assert len(_launches(run)) == 2  # the refused ones recorded nothing

        # reading beside the running launch works, and writes only under samples/
        sampled = run_kestrel("sample", "posterior", "-o", run, "-n", "5", "--seed", "2")
        assert sampled.returncode == 0, sampled.stdout + sampled.stderr
        assert proc.poll() is None  # the first launch still runs
        assert json.loads((run / "status.json").read_text())["status"] == "running"
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, out

    launches = _launches(run)  # exactly one entry per launch that ran
    assert [(x["mode"], x["status"]) for x in launches] == [
        ("new", "completed"),
        ("resume", "interrupted"),
    ], launches
    assert json.loads((run / "status.json").read_text())["status"] == "interrupted"
    assert not (run / LOCK_FILE).exists()  # released on Ctrl-C too

    # the run is free again: a resume runs (and is recorded)
    resumed = run_kestrel("launch", "-o", run, "--epochs", "1")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert [x["status"] for x in _launches(run)] == ["completed", "interrupted", "completed"]


def test_k38_two_fresh_launches_of_one_new_folder_exactly_one_runs(tmp_path):
    run = tmp_path / "new" / "run"  # nothing exists yet
    config = example("01_minimal")

    def start(seed: str) -> subprocess.Popen:
        args = [*KESTREL, "launch", "-c", str(config), "-o", str(run), "--seed", seed]
        return subprocess.Popen(
            [*args, *tiny(config, epochs=2)],
            cwd=str(REPO),
            env=kestrel_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    procs = {"2": start("2"), "3": start("3")}  # the issue's `… --seed 2 & … --seed 3`
    done = {}
    for seed, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        done[seed] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    codes = sorted(d.returncode for d in done.values())
    assert codes == [0, 1], {s: (d.returncode, d.stdout, d.stderr) for s, d in done.items()}
    (winner,) = [s for s, d in done.items() if d.returncode == 0]
    (loser,) = [s for s, d in done.items() if d.returncode == 1]
    _refusal(done[loser], procs[winner].pid)
    (launch,) = _launches(run)  # one launch ran: one entry, with the winner's seed
    assert launch["mode"] == "new" and launch["status"] == "completed"
    assert launch["seed"] == int(winner)
    assert not (run / LOCK_FILE).exists()
