"""The config's ``logging.level`` sets the driver log's threshold (file and console)."""

from __future__ import annotations

import os

from kestrel.report._logging import driver_logger
from kestrel.rundir._rundir import RunDir


def _log_lines(run: RunDir) -> str:
    with open(os.path.join(run.node_dir("driver"), "output.log"), encoding="utf-8") as f:
        return f.read()


def test_debug_level_writes_debug_records_and_the_default_does_not(tmp_path, capsys):
    quiet, loud = RunDir(tmp_path / "quiet"), RunDir(tmp_path / "loud")
    with driver_logger(quiet) as log:
        log.debug("a debug record")
        log.info("an info record")
    with driver_logger(loud, level="debug") as log:
        log.debug("a debug record")
    assert "an info record" in _log_lines(quiet) and "a debug record" not in _log_lines(quiet)
    assert "a debug record" in _log_lines(loud)
    assert "a debug record" in capsys.readouterr().out


def test_warning_level_drops_info_from_file_and_console(tmp_path, capsys):
    run = RunDir(tmp_path / "run")
    with driver_logger(run, level="WARNING") as log:
        log.info("an info record")
        log.warning("a warning record")
    assert "an info record" not in _log_lines(run) and "a warning record" in _log_lines(run)
    out = capsys.readouterr().out
    assert "an info record" not in out and "a warning record" in out
