"""``kestrel_core.Program``: a simulator that is an external program (issue 32, item 1).

The programs here are not Python: POSIX shell scripts (always) and a small C program (when a C
compiler is present). Each fails on purpose for some inputs: a crash (a non-zero exit status,
or a signal), a hang (the time limit) and garbage output, one sample at a time or a whole chunk.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from kestrel_core import (
    ConfigError,
    ProgramError,
    SimulatorError,
    load_config,
    sample_forward,
)
from kestrel_core import Program as PublicProgram
from kestrel_core.internal import SkipLog, simulate_or_skip
from kestrel_core.program._program import Program

#: per sample: θ < 1 fine; [1, 2) crash; [2, 3) hang; ≥ 3 garbage
SIM_SH = """\
#!/bin/sh
# sim.sh THETA SEED: two numbers on stdout, drawn from SEED
theta=$1
seed=$2
kind=$(awk -v t="$theta" 'BEGIN { if (t >= 3) print "garbage"; else if (t >= 2) print "hang"; else if (t >= 1) print "crash"; else print "ok" }')
case $kind in
  crash) echo "sim.sh: theta=$theta is out of range" >&2; exit 3 ;;
  hang) echo "sim.sh: thinking about theta=$theta" >&2; sleep 1000 ;;
  garbage) echo "this is not a number" ;;
  ok) awk -v t="$theta" -v s="$seed" 'BEGIN { srand(s); printf "%.17g %.17g\\n", t + rand(), t - rand() }' ;;
esac
"""

#: per chunk: reads rows of θ (csv), writes rows of two numbers (csv); a bad θ fails the chunk
CHUNK_SH = """\
#!/bin/sh
# chunk.sh IN OUT SEED
in=$1
out=$2
seed=$3
kind=$(awk -F, '{ if ($1 >= 3) g = 1; else if ($1 >= 2) h = 1; else if ($1 >= 1) c = 1 } END { print (c ? "crash" : h ? "hang" : g ? "garbage" : "ok") }' "$in")
case $kind in
  crash) echo "chunk.sh: a theta is out of range" >&2; exit 3 ;;
  hang) sleep 1000 ;;
  garbage) echo "1,2,oops" > "$out" ;;
  ok) awk -F, -v s="$seed" 'BEGIN { srand(s) } { printf "%.17g,%.17g\\n", $1 + rand(), $1 - rand() }' "$in" > "$out" ;;
esac
"""

SIM_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* sim THETA SEED: three numbers drawn from SEED (a 64-bit LCG) */
int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: sim THETA SEED\n"); return 2; }
    double theta = atof(argv[1]);
    unsigned long long x = strtoull(argv[2], NULL, 10);
    if (theta >= 3) { printf("%s\n", "@@ garbage @@"); return 0; }
    if (theta >= 2) { fprintf(stderr, "sim: stuck on theta=%g\n", theta); for (;;) sleep(1); }
    if (theta >= 1) { fprintf(stderr, "sim: theta=%g is out of range\n", theta); abort(); }
    for (int i = 0; i < 3; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        printf("%.17g ", theta + (double)(x >> 11) / 9007199254740992.0);
    }
    printf("\n");
    return 0;
}
"""


def script(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def sim_sh(tmp_path):
    return script(tmp_path, "sim.sh", SIM_SH)


@pytest.fixture
def chunk_sh(tmp_path):
    return script(tmp_path, "chunk.sh", CHUNK_SH)


@pytest.fixture(scope="module")
def sim_c(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc) on this machine")
    folder = tmp_path_factory.mktemp("csim")
    (folder / "sim.c").write_text(SIM_C)
    done = subprocess.run(
        [cc, "-O1", "-o", str(folder / "sim"), str(folder / "sim.c")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        pytest.skip(f"the C compiler {cc} failed: {done.stderr[-300:]}")
    return folder / "sim"


def rng(seed=0):
    return np.random.default_rng(seed)


def column(*values):
    return np.array(values, dtype=np.float64)[:, None]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_dead(pid: int, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


# --- per sample --------------------------------------------------------------------------------


def test_program_is_public_and_runs_a_shell_script_per_sample(sim_sh, tmp_path):
    assert PublicProgram is Program
    sim = Program([str(sim_sh), "{theta}", "{seed}"], parents=["theta"], scratch=tmp_path / "s")
    out = sim.simulate_batch(4, column(0.1, 0.2, 0.3, 0.4), rng=rng())
    assert out.shape == (4, 2) and out.dtype == np.float64
    assert np.all((out[:, 0] > column(0.1, 0.2, 0.3, 0.4)[:, 0]) & (out[:, 0] < 1.5))
    assert os.listdir(tmp_path / "s") == []  # every scratch folder removed on success


def test_program_same_seed_same_output(sim_sh, tmp_path):
    sim = Program([str(sim_sh), "{0}", "{seed}"], scratch=tmp_path)
    theta = column(0.1, 0.5, 0.9)
    a = sim.simulate_batch(3, theta, rng=rng(7))
    b = sim.simulate_batch(3, theta, rng=rng(7))
    c = sim.simulate_batch(3, theta, rng=rng(8))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.array_equal(a[0] - 0.1, a[1] - 0.5)  # each sample its own seed


def test_program_per_sample_names_each_failure_and_keeps_the_others(sim_sh, tmp_path):
    scratch = tmp_path / "scratch"
    sim = Program(
        [str(sim_sh), "{theta}", "{seed}"],
        parents=["theta"],
        time_limit=1.0,
        scratch=scratch,
        shape=[2],
    )
    theta = column(0.5, 1.5, 2.5, 3.5, 0.2)
    start = time.monotonic()
    with pytest.raises(ProgramError) as info:
        sim.simulate_batch(5, theta, rng=rng())
    assert time.monotonic() - start < 60  # the hang was stopped
    err = info.value
    assert isinstance(err, SimulatorError)
    assert err.failed.tolist() == [False, True, True, True, False]
    assert np.isfinite(err.value[[0, 4]]).all()
    text = str(err)
    assert text.startswith("3 of 5 samples failed; the first: program ")
    assert str(sim_sh) in text and "exited with status 3" in text
    assert "sim.sh: theta=1.5 is out of range" in text  # the last lines of its stderr
    kept = sorted(scratch.iterdir())
    assert len(kept) == 3  # one per failed run; the good runs' folders are gone
    assert str(err.__cause__.folder) in text and Path(err.__cause__.folder) in kept
    assert (Path(err.__cause__.folder) / ".stderr").read_text().startswith("sim.sh: theta=1.5")


def test_program_crash_hang_and_garbage_each_name_the_command_status_and_stderr(sim_sh, tmp_path):
    sim = Program([str(sim_sh), "{0}", "{seed}"], time_limit=1.0, scratch=tmp_path)
    texts = {}
    for kind, theta in (("crash", 1.5), ("hang", 2.5), ("garbage", 3.5)):
        with pytest.raises(ProgramError) as info:
            sim.simulate_batch(1, column(theta), rng=rng())
        texts[kind] = str(info.value)
        assert info.value.failed.tolist() == [True] and info.value.value is None
        assert texts[kind].startswith(f"program {sim_sh} {theta} ")
        assert "its scratch folder is kept: " in texts[kind]
    assert "exited with status 3" in texts["crash"] and "out of range" in texts["crash"]
    assert "ran past its time limit of 1 s and was killed" in texts["hang"]
    assert "thinking about theta=2.5" in texts["hang"]
    assert "exited with status 0 but its output (stdout, txt) is unusable" in texts["garbage"]
    assert "(its stderr was empty)" in texts["garbage"]


def test_program_time_limit_kills_the_scripts_children(tmp_path):
    pidfile = tmp_path / "pid"
    hang = script(tmp_path, "hang.sh", f'#!/bin/sh\nsleep 1000 &\necho $! > "{pidfile}"\nwait\n')
    sim = Program([str(hang)], time_limit=0.5, scratch=tmp_path / "s")
    with pytest.raises(ProgramError, match="time limit of 0.5 s") as info:
        sim.simulate_batch(1, rng=rng())
    assert info.value.status == "timeout"
    assert wait_dead(int(pidfile.read_text()))  # the background sleep died with the script


def test_program_killed_caller_takes_its_command_along(tmp_path):
    """A node's ``timeout`` kills the actor's process: the command it was running dies too."""
    pidfile = tmp_path / "pid"
    hang = script(tmp_path, "hang.sh", f'#!/bin/sh\nsleep 1000 &\necho $! > "{pidfile}"\nwait\n')
    code = textwrap.dedent(
        f"""
        from kestrel_core import Program
        Program([{str(hang)!r}], scratch={str(tmp_path / "s")!r}).simulate_batch(1)
        """
    )
    caller = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline and caller.poll() is None
            time.sleep(0.05)
        caller.send_signal(signal.SIGKILL)
    finally:
        caller.kill()
        caller.wait()
    assert wait_dead(int(pidfile.read_text()))


def test_program_in_on_error_skip_skips_exactly_the_failing_samples(sim_sh, tmp_path):
    sim = Program([str(sim_sh), "{0}", "{seed}"], time_limit=1.0, scratch=tmp_path)
    theta = column(0.5, 1.5, 0.7, 3.5)
    seq = np.random.SeedSequence(3)
    attempt = simulate_or_skip(
        "x", sim, 4, {"theta": theta}, rng=np.random.default_rng(seq), seq=seq, on_error="skip"
    )
    assert attempt.raised.tolist() == [False, True, False, True]
    assert np.isnan(attempt.value[[1, 3]]).all() and np.isfinite(attempt.value[[0, 2]]).all()
    assert "out of range" in str(attempt.first)
    # the good samples are those of the call itself: not simulated again
    alone = sim.simulate_batch(2, theta[[0, 2]], rng=np.random.default_rng(seq))
    assert not np.array_equal(alone, attempt.value[[0, 2]])  # (other seeds)
    with pytest.raises(ProgramError):  # on_error: raise
        simulate_or_skip("x", sim, 4, {"theta": theta}, rng=rng(), seq=seq, on_error="raise")


# --- per chunk ---------------------------------------------------------------------------------


def chunk_program(chunk_sh, tmp_path, **kw):
    return Program(
        [str(chunk_sh), "{input}", "{output}", "{seed}"],
        per="chunk",
        input={"file": "theta.csv"},
        output={"file": "x.csv"},
        shape=[2],
        time_limit=1.0,
        scratch=tmp_path / "scratch",
        **kw,
    )


def test_program_per_chunk_runs_once_per_call(chunk_sh, tmp_path):
    sim = chunk_program(chunk_sh, tmp_path)
    theta = column(0.1, 0.2, 0.3)
    a = sim.simulate_batch(3, theta, rng=rng(1))
    assert a.shape == (3, 2) and np.all(a[:, 0] > theta[:, 0])
    assert np.array_equal(a, sim.simulate_batch(3, theta, rng=rng(1)))
    assert os.listdir(tmp_path / "scratch") == []


def test_program_per_chunk_failures_are_found_one_sample_at_a_time(chunk_sh, tmp_path):
    sim = chunk_program(chunk_sh, tmp_path)
    theta = column(0.1, 1.5, 0.2, 2.5, 3.5)
    with pytest.raises(ProgramError) as info:
        sim.simulate_batch(5, theta, rng=rng())
    assert info.value.failed is None and "exited with status 3" in str(info.value)
    seq = np.random.SeedSequence(4)
    attempt = simulate_or_skip(
        "x", sim, 5, {"theta": theta}, rng=np.random.default_rng(seq), seq=seq, on_error="skip"
    )
    assert attempt.raised.tolist() == [False, True, False, True, True]
    assert np.isfinite(attempt.value[[0, 2]]).all()
    kept = sorted((tmp_path / "scratch").iterdir())
    assert len(kept) == 5  # the failed chunk (twice), then its 3 failing samples
    assert all((k / "theta.csv").is_file() for k in kept)


# --- a C program -------------------------------------------------------------------------------


def test_program_c_per_sample_crash_hang_garbage_and_seeds(sim_c, tmp_path):
    sim = Program(
        [str(sim_c), "{theta}", "{seed}"],
        parents=["theta"],
        shape=[3],
        time_limit=1.0,
        scratch=tmp_path,
    )
    theta = column(0.5, 1.5, 2.5, 3.5, 0.25)
    with pytest.raises(ProgramError) as info:
        sim.simulate_batch(5, theta, rng=rng(2))
    assert info.value.failed.tolist() == [False, True, True, True, False]
    texts = []
    for value in (1.5, 2.5, 3.5):
        with pytest.raises(ProgramError) as one:
            sim.simulate_batch(1, column(value), rng=rng())
        texts.append(str(one.value))
    assert "killed by signal 6 (SIGABRT)" in texts[0] and "theta=1.5 is out of range" in texts[0]
    assert "time limit of 1 s" in texts[1] and "stuck on theta=2.5" in texts[1]
    assert "is unusable" in texts[2]
    good = column(0.5, 0.25)
    a = sim.simulate_batch(2, good, rng=rng(9))
    assert a.shape == (2, 3) and np.array_equal(a, sim.simulate_batch(2, good, rng=rng(9)))
    assert np.array_equal(a[[0, 1]], info.value.value[[0, 4]]) is False  # other seeds
    assert len(list(tmp_path.iterdir())) == 6  # the failed runs' folders only


# --- inputs and outputs ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "npz", "npy", "csv", "txt"])
@pytest.mark.parametrize("per", ["sample", "chunk"])
def test_program_input_and_output_formats_round_trip(tmp_path, fmt, per):
    """``cp`` copies the input file to the output file: the parents come back as written."""
    theta = np.arange(6.0).reshape(3, 2) / 7
    key = {"key": "theta"} if fmt in ("json", "npz") else {}
    sim = Program(
        ["/bin/cp", "{input}", "{output}"],
        per=per,
        parents=["theta"],
        input={"file": f"in.{fmt}"},
        output={"file": f"out.{fmt}", **key},
        scratch=tmp_path,
    )
    assert np.array_equal(sim.simulate_batch(3, theta, rng=rng()), theta)


@pytest.mark.parametrize("fmt", ["txt", "csv", "npy", "json"])
def test_program_stdin_to_stdout(tmp_path, fmt):
    theta = np.array([[0.5, 1.0 / 3.0]])
    sim = Program(
        ["cat"],
        per="chunk",
        input={"stdin": fmt},
        output={"stdout": fmt, **({"key": "0"} if fmt == "json" else {})},
        scratch=tmp_path,
    )
    assert np.array_equal(sim.simulate_batch(1, theta, rng=rng()), theta)


def test_program_templates_arguments_and_environment(tmp_path):
    record = 'printf "%s|" "$@" "$K1" > "$OUT"; echo 1'
    sim = Program(
        ["sh", "-c", record, "sh", "{theta}", "{theta[1]:.2f}", "w={theta}", "{n}", "{1}"],
        parents=["theta", "mu"],
        env={"K1": "s{seed}", "OUT": "{scratch}/../args.txt"},
        scratch=tmp_path,
    )
    sim.simulate_batch(1, np.array([[0.25, 0.5]]), np.array([3]), rng=rng(0))
    seed = int(np.random.default_rng(0).integers(0, 2**31 - 1, size=1)[0])
    assert (tmp_path / "args.txt").read_text() == f"0.25|0.5|0.50|w=0.25,0.5|1|3|s{seed}|"


def test_program_refuses_a_bad_config_naming_the_option():
    cases = [
        (dict(command=[]), "command: expected a non-empty list"),
        (dict(command=["{seed}"]), "command[0]: the program"),
        (dict(command=["./sim", "{nope}"]), "command[1]: unknown template field {nope}"),
        (dict(command=["./sim", "{input}"]), "command[1]: {input} names the input file"),
        (dict(command=["./sim", "{output}"]), "{output} names the output file"),
        (dict(command=["./sim", "{0}"], per="chunk"), "a per-chunk run gets in its input file"),
        (dict(command=["./sim"], per="row"), "per: expected 'sample' or 'chunk'"),
        (dict(command=["./sim"], input={"file": "a.bin"}), "input: cannot tell the format"),
        (dict(command=["./sim"], input={"file": "../a.json"}), "input.file: expected a file name"),
        (dict(command=["./sim"], output={"stdout": "xml"}), "output: format 'xml'"),
        (dict(command=["./sim"], output={"file": "a", "stdout": "txt"}), "exactly one of"),
        (dict(command=["./sim"], time_limit=0), "time_limit: expected seconds > 0"),
        (dict(command=["./sim"], parents=["seed"]), "parents: 'seed' must be an identifier"),
        (dict(command=["./sim"], shape=[-1]), "shape: expected a list of sizes"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError) as info:
            Program(**kwargs)
        assert message in str(info.value), (kwargs, str(info.value))


def test_program_that_cannot_start_is_not_a_failed_sample(tmp_path):
    sim = Program([str(tmp_path / "missing")], scratch=tmp_path)
    with pytest.raises(SimulatorError, match="cannot be started") as info:
        sim.simulate_batch(1, rng=rng())
    assert not isinstance(info.value, ProgramError)


# --- from a config: paths, on_error, trust ------------------------------------------------------


def program_config(folder: Path, **program) -> Path:
    spec = {
        "_target_": "kestrel_core.Program",
        "command": ["./sim.sh", "{theta}", "{seed}"],
        "parents": ["theta"],
        "shape": [2],
        "time_limit": 1.0,
        **program,
    }
    data = {
        "graph": {
            "theta": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 4.0]],
                }
            },
            "x": {"simulator": spec, "parents": ["theta"], "on_error": "skip"},
        }
    }
    (folder / "config.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder / "config.yml"


def test_program_in_a_config_resolves_paths_and_skips_failures(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    script(model, "sim.sh", SIM_SH)
    config = program_config(model, scratch="scratch", cwd=".")
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config(config)
    spec = cfg.to_dict()["graph"]["x"]["simulator"]
    assert spec["command"][0] == str(model / "sim.sh")
    assert spec["scratch"] == str(model / "scratch") and spec["cwd"] == str(model)
    trace = sample_forward(cfg.graph, 12, seed=5)
    x = trace["x.value"]
    theta = trace["theta.value"][:, 0]
    assert x.shape == (12, 2)
    failed = theta >= 1
    assert failed.any() and (~failed).any()
    assert np.isnan(x[failed]).all() and np.isfinite(x[~failed]).all()
    skipped = SkipLog()
    kept = sample_forward(cfg.graph, 12, seed=5, skipped=skipped)  # the same seed: the same draws
    assert skipped.errors == {"x": int(failed.sum())}
    assert np.array_equal(kept["x.value"], x[~failed])
    assert "out of range" in skipped.error["x"][0] or "unusable" in skipped.error["x"][0]


def test_program_trust_a_run_folders_config_runs_only_programs_of_its_code_folders(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    script(model, "sim.sh", SIM_SH)
    run = tmp_path / "run"
    run.mkdir()

    def load(trust=False, **program):
        config = program_config(model, **program)
        data = yaml.safe_load(config.read_text())
        data["paths"] = {"imports": [str(model)]}
        return load_config(data, run_dir=run, base_dir=model, trust=trust, origin=run / "c.yml")

    load()  # the program is a file of the code folder
    cases = {
        "is looked up on PATH": dict(command=["sh", "-c", "touch PWNED"]),
        "is not in the run's code folders": dict(command=["/bin/rm", "-rf", "{scratch}"]),
        "env.LD_PRELOAD: not taken": dict(env={"LD_PRELOAD": "/tmp/evil.so"}),
        "env.BASH_ENV: not taken": dict(env={"BASH_ENV": "/tmp/evil.sh"}),
    }
    for message, program in cases.items():
        with pytest.raises(ConfigError) as info:
            load(**program)
        text = str(info.value)
        assert text.startswith(f"{run / 'c.yml'}: refused") and message in text, text
        assert "graph.x.simulator.command" in text or "graph.x.simulator.env" in text
        assert "--trust" in text
        load(trust=True, **program)  # the user trusts the run
    script(run, "sim.sh", SIM_SH)  # a program carried by the run folder itself
    with pytest.raises(ConfigError, match="lies inside the run folder"):
        load(command=[str(run / "sim.sh"), "{theta}", "{seed}"])
    load(env={"OMP_NUM_THREADS": "1"})  # harmless variables are fine
