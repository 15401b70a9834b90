"""The restart watch logs one line per restart of a node actor, also when several happened
between two of its polls (a loaded machine polls late): the driver's log reads the same
whatever the machine's speed."""

from __future__ import annotations

import logging

import pytest

from kestrel.controller import _restarts


def test_two_restarts_between_two_polls_are_two_lines(monkeypatch, caplog):
    table = {"NumRestarts": 0, "State": "ALIVE", "Address": {"NodeID": "n1"}}
    monkeypatch.setattr(_restarts, "actor_infos", lambda actors: [dict(table) for _ in actors])
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


def test_one_actor_table_read_per_poll_whatever_the_replicas(monkeypatch, caplog):
    """The watch reads Ray's actor table once per poll for all the launch's actors (one list
    request), not once per actor: its cost does not grow with the replicas (issue 32 item 3).
    A restart of one replica among many is still seen and logged for that replica."""
    reads: list[int] = []
    restarted = {"NumRestarts": 1, "State": "ALIVE", "Address": {"NodeID": "n1"}}
    table = {"NumRestarts": 0, "State": "ALIVE", "Address": {"NodeID": "n1"}}
    actors = {"theta": [object()], "x": [object() for _ in range(64)]}
    crashed = actors["x"][37]
    after: list[bool] = []

    def infos(group):
        reads.append(len(group))
        return [dict(restarted if after and a is crashed else table) for a in group]

    monkeypatch.setattr(_restarts, "actor_infos", infos)
    monkeypatch.setattr(
        _restarts, "actor_info", lambda actor: pytest.fail("a per-actor read of the table")
    )
    monkeypatch.setattr(_restarts, "_alive_nodes", lambda: {"n1"})
    restarts: dict[str, int] = {}
    watch = _restarts.RestartWatch(actors, logging.getLogger("t"), restarts)
    watch.poll(force=True)
    after.append(True)
    with caplog.at_level(logging.WARNING, logger="t"):
        watch.poll(force=True)
    assert reads == [65, 65]  # one read per poll, every actor in it
    assert restarts == {"x": 1}
    assert [r.getMessage().split(" restarted")[0] for r in caplog.records] == [
        "node 'x': actor (replica 37)"
    ]
