"""The restart watch logs one line per restart of a node actor, also when several happened
between two of its polls (a loaded machine polls late): the driver's log reads the same
whatever the machine's speed."""

from __future__ import annotations

import logging

from kestrel.controller import _restarts


def test_two_restarts_between_two_polls_are_two_lines(monkeypatch, caplog):
    table = {"NumRestarts": 0, "State": "ALIVE", "Address": {"NodeID": "n1"}}
    monkeypatch.setattr(_restarts, "actor_info", lambda actor: dict(table))
    monkeypatch.setattr(_restarts, "_alive_nodes", lambda: {"n1"})
    restarts: dict[str, int] = {}
    watch = _restarts.RestartWatch(
        {"x": [object()]}, logging.getLogger("t"), restarts, max_restarts={"x": 3}
    )
    watch.poll(force=True)
    table["NumRestarts"] = 2  # two crashes before the next poll
    with caplog.at_level(logging.WARNING, logger="t"):
        watch.poll(force=True)
    lines = [r.getMessage() for r in caplog.records]
    assert restarts == {"x": 2}
    assert [line.split("(restart ")[1].split(")")[0] for line in lines] == [
        "1 of at most 3",
        "2 of at most 3",
    ]
    assert all("node 'x': actor (replica 0) restarted after a crash" in line for line in lines)
