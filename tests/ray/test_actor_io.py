"""The actor's stdout/stderr as log lines (``run._actorio``) and Ray's forwarding off for a launch."""

from __future__ import annotations

import contextlib
import sys

import kestrel.session._ray as ray_module
from kestrel.report._actorio import MAX_LINE, LineWriter, capture_prints


def writer():
    kept: list[str] = []
    return LineWriter(kept.extend, "stdout"), kept


def test_complete_lines_are_kept_with_time_and_stream_and_a_partial_one_waits():
    w, kept = writer()
    assert w.write("one\ntw") == 6 and w.write("o\n") == 2
    w.write("three")
    assert [k.split(" ", 2)[2] for k in kept] == ["INFO stdout: one", "INFO stdout: two"]
    w.close()
    assert kept[-1].endswith("INFO stdout: three")


def test_a_line_redrawn_in_place_keeps_its_last_state_and_a_long_line_is_cut():
    w, kept = writer()
    for pct in range(0, 101, 10):
        w.write(f"\rprogress {pct}%")
    w.write("\r\n")
    w.write("x" * (MAX_LINE + 1))
    assert [k.split(": ", 1)[1] for k in kept] == ["progress 100%", "x" * (MAX_LINE + 1)]
    assert not w.isatty() and w.writable()


def test_print_and_warnings_in_the_process_go_to_the_receiver(monkeypatch):
    kept: list[str] = []
    monkeypatch.setattr(sys, "stdout", sys.stdout)
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    capture_prints(kept.extend)
    print("hello", 42)
    print("on stderr", file=sys.stderr)
    again: list[str] = []
    capture_prints(again.extend)  # a reopened log: the same writers, a new receiver
    print("later")
    assert [k.split(" ", 2)[2] for k in kept] == ["INFO stdout: hello 42", "INFO stderr: on stderr"]
    assert again[0].endswith("INFO stdout: later")


def test_a_launch_turns_rays_forwarding_off_unless_the_config_says_otherwise(monkeypatch):
    seen = []
    monkeypatch.setattr(ray_module.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_module.ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray_module, "init_ray", lambda address, **kw: seen.append(kw))
    for kwargs, ray_cfg in [({"log_to_driver": False}, {}), ({}, {}), ({}, {"log_to_driver": 1})]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(ray_module.ray_for_run(None, ray_cfg, **kwargs))
    assert [kw["log_to_driver"] for kw in seen] == [False, True, 1]
