"""A launch whose simulator is an external program that is not Python (issue 32, item 1).

A POSIX shell script simulates ``x = θ + N(0, 0.1²)`` from the seed Kestrel passes; among its
calls one crashes (exit status 3), one hangs (past its time limit) and one prints garbage. The
launch completes under ``on_error: skip`` with the three samples skipped, each failure named in
the node's log, and counted in ``status.json``'s ``errors``.
"""

from __future__ import annotations

import json

import numpy as np

from kestrel import launch

from .helpers import TINY

#: calls 12, 24 and 36 (counted in STATE, over the launch and its dry run) fail
SIM_SH = """\
#!/bin/sh
# sim.sh THETA SEED STATE: x = theta + N(0, 0.1^2), drawn from SEED
theta=$1
seed=$2
state=$3
count=$(( $(cat "$state" 2>/dev/null || echo 0) + 1 ))
echo "$count" > "$state"
case $count in
  12) echo "sim.sh: call $count crashes" >&2; exit 3 ;;
  24) echo "sim.sh: call $count hangs" >&2; sleep 1000 ;;
  36) echo "garbage from call $count"; exit 0 ;;
esac
awk -v t="$theta" -v s="$seed" 'BEGIN { srand(s); u = rand(); v = rand();
  printf "%.17g\\n", t + 0.1 * sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v) }'
"""


def program_config(tmp_path):
    sim = tmp_path / "sim.sh"
    sim.write_text(SIM_SH)
    sim.chmod(0o755)
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([0.5]))
    return {
        "buffer": {"min_samples": 64, "max_samples": 128, "validation_samples": 16},
        "graph": {
            "theta": {
                "simulator": {"_target_": "kestrel_core.Product", "priors": [["uniform", 0, 1]]},
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2},
            },
            "x": {
                "simulator": {
                    "_target_": "kestrel_core.Program",
                    "command": [str(sim), "{theta}", "{seed}", str(tmp_path / "calls")],
                    "parents": ["theta"],
                    "shape": [1],
                    "time_limit": 2,
                    "scratch": str(tmp_path / "scratch"),
                },
                "parents": ["theta"],
                "observed": str(obs),
                "on_error": "skip",
            },
        },
    }


def test_program_launch_completes_with_a_crash_a_hang_and_garbage_skipped(
    tmp_path, no_leaked_actors
):
    run = tmp_path / "run"
    result = launch(program_config(tmp_path), run, overrides=TINY, seed=3, progress=False)
    assert result.status == "completed"
    assert result.errors == {"x": 3}
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "completed" and status["errors"] == {"x": 3}
    log = (run / "graph" / "x" / "output.log").read_text()
    sim = tmp_path / "sim.sh"
    failures = [line for line in log.splitlines() if f"program {sim} " in line]
    assert len(failures) == 3, log[-3000:]
    assert "exited with status 3" in failures[0]
    assert "ran past its time limit of 2 s and was killed" in failures[1]
    assert "exited with status 0 but its output (stdout, txt) is unusable" in failures[2]
    driver = (run / "graph" / "driver" / "output.log").read_text()
    assert "first simulator exception (on_error: skip)" in driver
    # the first failure the driver collected (which one depends on when the pieces and rounds
    # were collected) names the program; the crash's stderr is in the node's log above
    assert f"program {sim} " in driver
    kept = sorted((tmp_path / "scratch").iterdir())  # the failed calls' folders only
    assert len(kept) == 3
    assert {(k / ".stderr").read_text().strip() for k in kept} == {
        "sim.sh: call 12 crashes",
        "sim.sh: call 24 hangs",
        "",  # the garbage
    }
    with np.load(result.samples["posterior"]) as data:
        assert np.isfinite(data["theta"]).all()
