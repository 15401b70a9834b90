"""``kestrel cluster slurm-script``: the SLURM batch script (issue 32 item 5), without Ray.

The script's body runs here under ``bash`` with a fake ``srun`` (it runs its command on this
machine) and a fake Python standing in for ``ray start``, ``kestrel launch`` and the node-count
check, on a three-node allocation: the head on the first node, a worker on each other node,
the launch joining the head's address, SIGTERM passed on to the launch, every node stopped.
The same script with real Ray and Kestrel: tests/integration/test_slurm_recipe.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kestrel.cli import main
from kestrel.cluster import SlurmOptions, slurm_script
from kestrel_core import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "slurm" / "kestrel.sbatch"
#: the arguments examples/slurm/README.md documents for examples/slurm/kestrel.sbatch
EXAMPLE_ARGS = [
    "-c",
    "my_model/config.yml",
    "-o",
    "runs/my_run",
    "--nodes",
    "4",
    "--cpus-per-node",
    "32",
    "--time",
    "12:00:00",
    "--partition",
    "compute",
]

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_example_file_is_the_generators_output(capsys):
    assert main(["cluster", "slurm-script", *EXAMPLE_ARGS]) == 0
    printed = capsys.readouterr().out
    assert printed == EXAMPLE.read_text(), (
        "examples/slurm/kestrel.sbatch differs from the generator's output: regenerate it with "
        "kestrel cluster slurm-script " + " ".join(EXAMPLE_ARGS) + " --to "
        "examples/slurm/kestrel.sbatch --force"
    )
    readme = (EXAMPLE.parent / "README.md").read_text()
    assert "kestrel cluster slurm-script " + " ".join(EXAMPLE_ARGS) in readme


def test_script_directives_and_launch_line():
    text = slurm_script(
        SlurmOptions(
            "m/config.yml",
            "runs/a b",
            nodes=3,
            cpus_per_node=8,
            gpus_per_node=1,
            time="2-00:00:00",
            partition="gpu",
            account="proj1",
            port=6400,
            python="/opt/env/bin/python",
            stop_before=300,
            launch_args=("graph.x.num_actors=16",),
        )
    )
    for line in (
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --gpus-per-task=1",
        "#SBATCH --time=2-00:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj1",
        "#SBATCH --signal=B:TERM@300",
        "RUN='runs/a b'",
        "PORT=6400",
        "PYTHON=/opt/env/bin/python",
        "LAUNCH_ARGS=(graph.x.num_actors=16)",
    ):
        assert any(t == line or t.startswith(line + " ") for t in text.splitlines()), line
    # sbatch reads no trailing comment on a directive line: none is written
    assert all("#" not in line[1:] for line in text.splitlines() if line.startswith("#SBATCH"))
    assert "ray stop" not in text.replace("never `ray stop`", "")
    assert "--address" in text and "--resume" in text


def test_unset_options_are_commented_directives():
    text = slurm_script(SlurmOptions("c.yml", "run"))
    lines = text.splitlines()
    for off in ("##SBATCH --partition=P", "##SBATCH --account=A", "##SBATCH --gpus-per-task=G"):
        assert off in lines
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --time=01:00:00" in lines


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"time": "4h"}, "--time '4h'"),
        ({"partition": "gpu; rm -rf ~"}, "--partition"),
        ({"account": "a b"}, "--account"),
        ({"port": 70000}, "--port 70000"),
        ({"nodes": 0}, "--nodes 0"),
        ({"config": " "}, "-c:"),
    ],
)
def test_bad_values_are_one_line_errors(change, needle):
    fields = {"config": "c.yml", "run": "r", **change}
    with pytest.raises(ConfigError) as err:
        slurm_script(SlurmOptions(**fields))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_to_file_refuses_an_existing_file_without_force(tmp_path, capsys):
    target = tmp_path / "job.sbatch"
    args = ["cluster", "slurm-script", "-c", "c.yml", "-o", "r", "--to", str(target)]
    assert main(args) == 0
    assert target.read_text().startswith("#!/bin/bash\n")
    target.write_text("mine\n")
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err and str(target) in err
    assert target.read_text() == "mine\n"
    assert main([*args, "--force", "--nodes", "5"]) == 0
    assert "#SBATCH --nodes=5" in target.read_text()


def test_cluster_command_imports_neither_ray_nor_torch():
    code = (
        "import sys; from kestrel.cli import main; "
        "assert main(['cluster', 'slurm-script', '-c', 'c.yml', '-o', 'r']) == 0; "
        "main(['--help']); "
        "sys.stderr.write(repr(sorted(m for m in ('ray', 'torch') if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.endswith("[]"), done.stderr
    assert "cluster" in done.stdout  # listed by kestrel --help


@needs_bash
def test_script_is_valid_bash(tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text(slurm_script(SlurmOptions("c.yml", "r", gpus_per_node=2, account="x")))
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@needs_bash
@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node7", ["node7"]),
        ("a1,b2", ["a1", "b2"]),
        ("n[01-03,07]", ["n01", "n02", "n03", "n07"]),
        ("gpu[8-10],cpu3,x[1-2]-ib", ["gpu8", "gpu9", "gpu10", "cpu3", "x1-ib", "x2-ib"]),
    ],
)
def test_node_list_expanded_without_scontrol(tmp_path, nodelist, hosts):
    text = slurm_script(SlurmOptions("c.yml", "r"))
    start = text.index("hostnames() {")
    function = text[start : text.index("\n}\n", start) + 3]
    (tmp_path / "f.sh").write_text(function)
    done = subprocess.run(
        ["bash", "-c", f'PATH=/nonexistent; source {tmp_path}/f.sh; hostnames "$1"', "_", nodelist],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == hosts


# ---- the script's body on a fake three-node allocation -------------------------------------

FAKE_SRUN = """#!/bin/bash
# srun of the test: log the step, skip srun's options, run the command here
echo "srun $*" >> "$FAKE_LOG"
while [[ $1 == -* ]]; do shift; done
exec "$@"
"""

FAKE_PYTHON = """#!{python}
# the Python of the test's job: `ray start`, `kestrel launch` and the node check, faked
import os, signal, socket, sys, time

args = sys.argv[1:]
log = open(os.environ["FAKE_LOG"], "a", buffering=1)
log.write("python " + " ".join(args) + "\\n")


def value(name):
    return next(a.split("=", 1)[1] for a in args if a.startswith(name + "="))


def until_term(name, status):
    def on_term(*_):
        log.write(name + " TERM\\n")
        sys.exit(status)

    signal.signal(signal.SIGTERM, on_term)
    log.write(name + " up\\n")
    while True:
        time.sleep(0.05)


if args[0] == "-":  # the node check (its program on stdin): until every node is up
    sys.stdin.read()
    deadline = time.monotonic() + 60
    while open(os.environ["FAKE_LOG"]).read().count(" up\\n") < int(args[2]):
        if time.monotonic() > deadline:
            sys.exit("fake python: the nodes did not come up")
        time.sleep(0.05)
    sys.exit(0)
if args[:3] == ["-m", "ray.scripts.scripts", "start"]:
    if "--head" in args:
        head = socket.socket()
        head.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        head.bind((value("--node-ip-address"), int(value("--port"))))
        head.listen()
        until_term("head", 0)
    until_term("worker", 0)
if args[:3] == ["-m", "kestrel", "launch"]:
    if os.environ.get("FAKE_LAUNCH") == "forever":
        open(os.environ["FAKE_LOG"] + ".launched", "w").close()
        until_term("launch", 143)
    sys.exit(0)
sys.exit(f"fake python: unexpected {{args}}")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_job(tmp_path: Path, launch: str) -> tuple[subprocess.Popen, Path]:
    """The script of a 3-node job under bash with the fakes; ``(process, log file)``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    for name in ("srun", "python"):
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    options = SlurmOptions(
        "m/config.yml", "runs/r", nodes=3, port=free_port(), python=str(bin_dir / "python")
    )
    script.write_text(slurm_script(options))
    log = tmp_path / "log"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FAKE_LOG": str(log),
        "FAKE_LAUNCH": launch,
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "n[01-02],gpu7",
        "SLURM_NNODES": "3",
        "SLURM_CPUS_PER_TASK": "4",
    }
    proc = subprocess.Popen(
        ["bash", str(script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    return proc, log


def finish(proc: subprocess.Popen, timeout: float = 120) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the job script did not end within {timeout} s:\n{out}")
    return out


@needs_bash
def test_fake_three_node_job_runs_head_workers_launch_and_stops_them(tmp_path):
    proc, log = fake_job(tmp_path, "done")
    out = finish(proc)
    assert proc.returncode == 0, out
    lines = log.read_text().splitlines()
    steps = [line for line in lines if line.startswith("srun ") and " start " in line]
    assert len(steps) == 3, lines
    assert "--nodelist=n01" in steps[0] and " --head " in steps[0]
    assert "--cpus-per-task=4" in steps[0] and "--num-cpus=4" in steps[0]
    assert "--temp-dir=/tmp/ray-4242" in steps[0]
    address = next(w for w in steps[1].split() if w.startswith("--address=")).split("=")[1]
    assert sorted(s.split("--nodelist=")[1].split()[0] for s in steps[1:]) == ["gpu7", "n02"]
    assert all(f"--address={address}" in s for s in steps[1:])
    launch = next(line for line in lines if " -m kestrel launch " in line)
    assert f"--address={address}" in launch and "-c m/config.yml -o runs/r" in launch
    assert "--resume" not in launch
    # every node stopped at the end: the two workers and the head
    assert sorted(line for line in lines if line.endswith(" TERM")) == [
        "head TERM",
        "worker TERM",
        "worker TERM",
    ]
    assert "Ray cluster stopped" in out


@needs_bash
def test_fake_job_sigterm_reaches_the_launch_then_nodes_stop(tmp_path):
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "config.yml").write_text("{}\n")  # a job submitted again
    proc, log = fake_job(tmp_path, "forever")
    deadline = time.monotonic() + 60
    while not Path(str(log) + ".launched").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail("the launch did not start:\n" + finish(proc))
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # what SLURM sends the batch shell (--signal=B:TERM@…)
    out = finish(proc)
    assert proc.returncode == 143, out
    lines = log.read_text().splitlines()
    launch = next(line for line in lines if " -m kestrel launch " in line)
    assert "--resume" in launch
    stops = [line for line in lines if line.endswith(" TERM")]
    assert stops[0] == "launch TERM" and sorted(stops[1:]) == [
        "head TERM",
        "worker TERM",
        "worker TERM",
    ]
    assert "SIGTERM: stopping kestrel launch gracefully" in out
    assert "kestrel launch ended with exit status 143" in out
