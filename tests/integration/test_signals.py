"""SIGTERM — what a batch scheduler or ``kill`` sends — stops a launch like the first Ctrl-C
(issue 11, item 1): weights and buffer saved, posterior sampled, exit status 143."""

from __future__ import annotations

import json
import signal

from .test_cli import FOREVER, start_launch, wait_for_epoch


def test_sigterm_stops_gracefully_like_the_first_ctrl_c(tmp_path):
    run = tmp_path / "run"
    proc = start_launch(run, *FOREVER)
    wait_for_epoch(proc, run, 1)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "SIGTERM: stopping gracefully" in out
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "interrupted" and "SIGTERM" in status["reason"]
    assert (run / "graph" / "z" / "saved.json").is_file()
    assert (run / "buffer" / "snapshots" / "buffer.npz").is_file()
    assert any((run / "samples" / "posterior").glob("*/000000.npz"))
