"""What a simulator prints on Ray goes to ``graph/<node>/output.log``, not the driver's terminal;
the actors' warnings still reach it as one line each."""

from __future__ import annotations

import logging
import re
import sys
import time
import warnings

import numpy as np
import pytest

from kestrel import launch

from .helpers import run_kestrel
from .test_launch import toy

LINES = 200


class Chatty:
    """x = z + noise; prints LINES lines per call (and a progress bar on stderr)."""

    def simulate_batch(self, n, z, rng):
        for i in range(LINES):
            print(f"chatty line {i} of a batch of {n}")
        print("progress 10%\rprogress 100%", file=sys.stderr)
        logging.getLogger("model").warning("chatty warns once per call")
        warnings.warn("chatty's Python warning", UserWarning, stacklevel=1)
        return z + 0.05 * rng.standard_normal(z.shape)


@pytest.mark.filterwarnings("default:chatty's Python warning")  # in the driver's dry run
def test_a_simulators_prints_go_to_its_output_log_not_the_driver(tmp_path, capfd, no_leaked_actors):
    cfg = toy(tmp_path, x=f"{__name__}.Chatty")
    launch(cfg, tmp_path / "run", seed=1, progress=False)
    time.sleep(1.5)  # what Ray would forward arrives late
    out, err = capfd.readouterr()
    assert "chatty line" not in out + err and "pid=" not in out + err
    assert "node x: WARNING model: chatty warns once per call" in err  # the actors' warnings
    # a Python warning too, as one line (no file path, no source line)
    assert "node x: WARNING py.warnings: UserWarning: chatty's Python warning" in err
    assert "warnings.warn(" not in err
    log = (tmp_path / "run" / "graph" / "x" / "output.log").read_text()
    calls = log.count(f"INFO stdout: chatty line {LINES - 1} of a batch")
    assert calls >= 1 and log.count("INFO stdout: chatty line 0 of a batch") == calls
    assert log.count("INFO stderr: progress 100%") == calls and "progress 10%" not in log
    assert re.search(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO stdout: chatty line 7 ", log, re.M
    )


def test_kestrel_launch_into_a_file_writes_no_actor_output_there(tmp_path):
    import yaml

    cfg = toy(tmp_path, x=f"{__name__}.Chatty")
    (tmp_path / "config.yml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    proc = run_kestrel(
        "launch", "-c", tmp_path / "config.yml", "-o", run, "--progress", "log", "--seed", "3"
    )
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert "chatty line" not in both and "\x1b[" not in both and "RunNodeWrapper" not in both
    assert "node x: WARNING model: chatty warns once per call" in proc.stderr
    log = (run / "graph" / "x" / "output.log").read_text()
    assert log.count(f"INFO stdout: chatty line {LINES - 1} of a batch") >= 1
    assert np.isfinite(
        np.load(run / "samples" / "posterior" / _only(run) / "000000.npz")["z"]
    ).all()


def _only(run):
    (folder,) = [p.name for p in (run / "samples" / "posterior").iterdir() if p.is_dir()]
    return folder
