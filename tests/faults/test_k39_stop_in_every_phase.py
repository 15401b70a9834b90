"""K39: a stop request stops the launch in every phase, within a few seconds, and saves.

A launch on ``kestrel_core.testing.models.Stall`` (x = z + noise, hanging or slow while a file
exists) is stopped by SIGINT to its process group (a terminal's Ctrl-C) or SIGTERM to its pid
(a batch scheduler) while a simulator hangs in a resimulation round, during a slow initial
simulation, during a long final sampling, and in the dry run. Every stop ends with the signal's
exit status (130 / 143), status ``interrupted``, the stored rows and the best weights saved; the
rows the initial simulation stored before the stop are reused by the resume. Calls still
running are abandoned after ``KESTREL_STOP_GRACE`` seconds (3 here; 10 by default).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.integration.helpers import KESTREL, kestrel_env

pytestmark = pytest.mark.faults

GRACE = 3  # KESTREL_STOP_GRACE for these launches
STOPPED_WITHIN = 90.0  # seconds from the signal to the exit, on a loaded 2-core machine


def write_model(folder: Path, **stall) -> Path:
    ctl = folder / "ctl"
    ctl.mkdir(parents=True)
    np.save(folder / "obs.npy", np.array([0.1, -0.2]))
    config = {
        "buffer": {
            "min_samples": 300,
            "max_samples": 600,
            "validation_samples": 20,
            "simulate_count": 32,
            "simulate_interval": 0.05,
        },
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -1.0, 1.0], ["uniform", -1.0, 1.0]],
                },
                "evidence": ["x"],
                "estimator": {
                    "_target_": "kestrel_torch.FlowPosterior",
                    "max_epochs": 1000000,
                    "early_stop_patience": 1000000,
                },
            },
            "x": {
                "simulator": {
                    "_target_": "kestrel_core.testing.models.Stall",
                    "hang": str(ctl / "hang"),
                    "slow": str(ctl / "slow"),
                    "per_sample": 0.1,
                    **stall,
                },
                "parents": ["z"],
                "observed": str(folder / "obs.npy"),
            },
        },
        "sample": {"posterior": {"n": 7}},
    }
    path = folder / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class Launch:
    """``kestrel launch`` in a session of its own; its output collected by a thread."""

    def __init__(self, *args: str, **env: str):
        self.proc = subprocess.Popen(
            [*KESTREL, "launch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=kestrel_env(KESTREL_STOP_GRACE=str(GRACE), **env),
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what, timeout: float = 240.0) -> None:
        """Until ``what()`` is true (or the text ``what`` is in the output)."""
        test = (lambda: what in self.out) if isinstance(what, str) else what
        deadline = time.monotonic() + timeout
        while not test():
            if self.proc.poll() is not None:
                self._reader.join(5)
                pytest.fail(f"kestrel launch ended early ({self.proc.returncode}):\n{self.out}")
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"timed out waiting for {what!r}:\n{self.out}")
            time.sleep(0.2)

    def stop(self, signum: int, *, group: bool = False) -> tuple[int, float]:
        """Send ``signum`` (to the process group: as a terminal's Ctrl-C); the exit status
        and the seconds until the process ended."""
        start = time.monotonic()
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=STOPPED_WITHIN + 60)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"not stopped {STOPPED_WITHIN + 60:g} s after {signum}:\n{self.out}")
        self._reader.join(10)
        return code, time.monotonic() - start

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)


def epochs(run: Path) -> int:
    try:
        rows = (run / "graph" / "z" / "metrics.csv").read_text().splitlines()[1:]
    except FileNotFoundError:
        return 0
    return int(rows[-1].split(",")[0]) if rows else 0


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def test_k39_ctrl_c_while_a_simulator_hangs_in_a_round_stops_and_saves(tmp_path):
    config = write_model(tmp_path / "m")
    run = tmp_path / "run"
    launch = Launch("-c", str(config), "-o", str(run), "--seed", "1", KESTREL_STALL_NOTE="1")
    launch.wait_for(lambda: epochs(run) >= 2)
    (tmp_path / "m" / "ctl" / "hang").touch()  # every call of x from now on hangs
    launch.wait_for("has run for")  # the stall is said in the progress
    code, took = launch.stop(signal.SIGINT, group=True)
    out = launch.out
    assert code == 130, out
    assert took < STOPPED_WITHIN, out
    assert re.search(r"node 'x'.* has run for \d+ s", out), out
    assert "abandoned" in out, out
    st = status(run)
    assert st["status"] == "interrupted" and "Ctrl-C" in st["reason"]
    assert (run / "graph" / "z" / "saved.json").is_file()  # the best weights
    assert (run / "buffer" / "snapshots" / "buffer.npz").is_file()  # every stored row
    assert any((run / "samples" / "posterior").glob("*/000000.npz"))  # x is not needed


def test_k39_sigterm_in_the_initial_simulation_keeps_its_stored_rows_for_the_resume(tmp_path):
    config = write_model(tmp_path / "m")
    slow = tmp_path / "m" / "ctl" / "slow"
    slow.touch()  # 0.1 s a row: 320 rows in ~32 s, 32 rows a piece
    run = tmp_path / "run"
    launch = Launch("-c", str(config), "-o", str(run), "--seed", "1")
    launch.wait_for(lambda: any((run / "buffer" / "journal").glob("*.npz")))
    code, took = launch.stop(signal.SIGTERM)
    out = launch.out
    assert code == 143, out
    assert took < STOPPED_WITHIN, out
    assert status(run)["status"] == "interrupted"
    kept = int(re.search(r"snapshot saved to .*'rows': (\d+)", out).group(1))
    assert 0 < kept < 320, out
    slow.unlink()
    resumed = subprocess.run(
        [*KESTREL, "launch", "-o", str(run), "graph.z.estimator.max_epochs=1", "--resume"],
        capture_output=True,
        text=True,
        env=kestrel_env(),
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"initial simulation: {320 - kept} samples from the prior" in resumed.stdout, (
        resumed.stdout
    )


def test_k39_sigterm_during_a_long_final_sampling_skips_it_and_says_so(tmp_path):
    # x hangs on calls of 150 rows or more: the PPD's 200 rows, never a round or a piece
    config = write_model(tmp_path / "m", hang_rows=150)
    run = tmp_path / "run"
    launch = Launch(
        "-c",
        str(config),
        "-o",
        str(run),
        "--seed",
        "1",
        "graph.z.estimator.max_epochs=2",
        "sample.ppd.n=200",
    )
    launch.wait_for("posterior samples →")
    code, took = launch.stop(signal.SIGTERM)
    out = launch.out
    assert code == 143, out
    assert took < STOPPED_WITHIN, out
    assert "sampling ppd skipped" in out and "kestrel sample ppd -o" in out, out
    assert status(run)["status"] == "interrupted"
    assert any((run / "samples" / "posterior").glob("*/000000.npz"))
    assert not (run / "samples" / "ppd").exists()


def test_k39_a_hang_in_the_dry_run_is_said_and_sigterm_ends_it(tmp_path):
    config = write_model(tmp_path / "m")
    (tmp_path / "m" / "ctl" / "hang").touch()
    run = tmp_path / "run"
    launch = Launch("-c", str(config), "-o", str(run), KESTREL_DRY_RUN_NOTE="1")
    launch.wait_for("dry run: node 'x'")
    code, took = launch.stop(signal.SIGTERM)
    assert code == 143, launch.out
    assert took < STOPPED_WITHIN
    assert "interrupted" in launch.out
    assert not (run / "run.json").exists()  # nothing was written
