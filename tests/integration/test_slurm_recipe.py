"""The SLURM recipe run for real on this machine (issue 32 item 5): the script that
``kestrel cluster slurm-script`` writes for one node, run with ``bash`` as ``sbatch`` would run it
— the environment of a one-node allocation, a fake ``srun`` that runs its command here (no
``scontrol``: the script expands ``SLURM_JOB_NODELIST`` itself) — starts a real Ray head
(``ray start --head --block`` on a free port, ``--num-cpus 2``, its own temp dir under
``/tmp/ray-<job id>``), ``kestrel launch`` joins it with ``--address`` and the script's exit trap
stops that head, and only it (SIGTERM to its step; the test never runs ``ray stop``, which would
stop every Ray on the machine). SIGTERM to the batch shell — what ``--signal=B:TERM@120`` does
before the time limit — reaches the launch, which ends ``interrupted`` with its weights saved,
and the same script run again resumes the run.

Whatever the outcome, the test ends every process that names the job's Ray temp dir. Debian's
``slurm-wlm`` is not used (a one-node slurmctld/slurmd is not set up here).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kestrel.cluster import SlurmOptions, slurm_script

from .helpers import REPO, example, kestrel_env, tiny
from .test_cli import FOREVER, epochs_logged

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="the batch script needs bash"),
    pytest.mark.skipif(
        shutil.which("hostname") is None,
        reason="the batch script finds the head's address with hostname",
    ),
    pytest.mark.timeout(900),
]

FAKE_SRUN = """#!/bin/bash
# srun of the test: skip srun's options, run the command on this machine
while [[ $1 == -* ]]; do shift; done
exec "$@"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """The batch script of a one-node job, run with bash; :meth:`cleanup` ends what it left."""

    def __init__(self, tmp_path: Path, overrides: list[str]) -> None:
        self.tmp = tmp_path
        self.run = tmp_path / "run"
        self.job_id = "k" + secrets.token_hex(4)  # Ray's temp dir: /tmp/ray-<job id>
        self.ray_temp = Path(f"/tmp/ray-{self.job_id}")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "srun").write_text(FAKE_SRUN)
        (bin_dir / "srun").chmod(0o755)
        options = SlurmOptions(
            str(example("01_minimal")),
            str(self.run),
            nodes=1,
            cpus_per_node=2,
            port=free_port(),
            python=sys.executable,
            launch_args=tuple(overrides),
        )
        self.script = tmp_path / "kestrel.sbatch"
        self.script.write_text(slurm_script(options))
        path = [bin_dir] + [p for p in os.environ["PATH"].split(os.pathsep) if p]
        self.env = kestrel_env(
            PATH=os.pathsep.join(
                str(p) for p in path if not (Path(p) / "scontrol").exists()
            ),  # no scontrol: the script expands the node list itself
            SLURM_JOB_ID=self.job_id,
            SLURM_JOBID=self.job_id,
            SLURM_JOB_NODELIST=socket.gethostname(),
            SLURM_NODELIST=socket.gethostname(),
            SLURM_JOB_NUM_NODES="1",
            SLURM_NNODES="1",
            SLURM_CPUS_ON_NODE="2",
            SLURM_CPUS_PER_TASK="2",
            SLURM_NTASKS_PER_NODE="1",
            SLURM_SUBMIT_DIR=str(REPO),
            CUDA_VISIBLE_DEVICES="",
        )
        self.proc: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        self.out = open(self.tmp / f"job-{self.job_id}.out", "w+")  # noqa: SIM115 - closed at the end
        self.proc = subprocess.Popen(
            ["bash", str(self.script)],
            cwd=str(REPO),
            env=self.env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the test can end the whole job if it must
        )
        return self.proc

    def output(self) -> str:
        self.out.flush()
        return (self.tmp / f"job-{self.job_id}.out").read_text(errors="replace")

    def wait(self, timeout: float = 400) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job script did not end within {timeout} s:\n{self.output()[-6000:]}")

    def own_pids(self) -> list[int]:
        """Processes whose command line names the job's Ray temp dir (its Ray node)."""
        mine = str(self.ray_temp).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if mine in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def ray_left(self, timeout: float = 60) -> list[int]:
        """The job's Ray processes still alive after ``timeout`` s (none once stopped)."""
        deadline = time.monotonic() + timeout
        while (left := self.own_pids()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)
        for pid in self.own_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.ray_temp, ignore_errors=True)
        if self.proc is not None:
            self.out.close()


@pytest.fixture
def jobs():
    started: list[Job] = []
    yield started
    for job in started:
        job.cleanup()


def test_slurm_script_one_node_job_completes_and_stops_its_ray(tmp_path, jobs):
    job = Job(tmp_path, tiny(example("01_minimal"), epochs=2))
    jobs.append(job)
    job.start()
    status = job.wait()
    out = job.output()
    assert status == 0, out[-6000:]
    assert "Ray head on " in out and "1 Ray node(s) up" in out
    assert "kestrel launch: completed" in out
    run_status = json.loads((job.run / "status.json").read_text())
    assert run_status["status"] == "completed" and run_status["epochs"] == {"z": 2}
    assert any((job.run / "samples" / "posterior").glob("*/000000.npz"))
    # the exit trap stopped the job's Ray head, and nothing of it is left
    assert "Ray cluster stopped" in out
    assert job.ray_left() == [], out[-3000:]


def test_slurm_script_sigterm_saves_and_a_resubmitted_job_resumes(tmp_path, jobs):
    overrides = tiny(example("01_minimal")) + FOREVER
    job = Job(tmp_path, overrides)
    jobs.append(job)
    proc = job.start()
    deadline = time.monotonic() + 300
    while epochs_logged(job.run) < 1:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no epoch trained ({proc.poll()}):\n{job.output()[-6000:]}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # SLURM's --signal=B:TERM@120: to the batch shell only
    status = job.wait(240)
    out = job.output()
    assert status == 143, out[-6000:]  # the launch's own status: stopped by SIGTERM
    assert "SIGTERM: stopping kestrel launch gracefully" in out
    assert "SIGTERM: stopping gracefully" in out  # kestrel launch's own line
    run_status = json.loads((job.run / "status.json").read_text())
    assert run_status["status"] == "interrupted" and "SIGTERM" in run_status["reason"]
    first_epochs = run_status["epochs"]["z"]
    assert (job.run / "graph" / "z" / "saved.json").is_file()  # the weights
    assert (job.run / "buffer" / "snapshots" / "buffer.npz").is_file()
    assert "Ray cluster stopped" in out
    assert job.ray_left() == [], out[-3000:]

    # the same script submitted again: the launch resumes the run and trains on
    again = Job(tmp_path, overrides)
    again.script = job.script  # the very same script (its port, its arguments)
    jobs.append(again)
    proc = again.start()
    deadline = time.monotonic() + 300
    while epochs_logged(job.run) <= first_epochs:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the resumed job trained no epoch:\n{again.output()[-6000:]}")
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert again.wait(240) == 143, again.output()[-6000:]
    out = again.output()
    assert "--resume" in out and "loaded saved weights" in out
    run_status = json.loads((job.run / "status.json").read_text())
    assert run_status["status"] == "interrupted" and run_status["epochs"]["z"] > first_epochs
    assert again.ray_left() == [], out[-3000:]
