"""``num_actors: auto`` in the config (issue 32, item 4): read, written back, refused where it
cannot work — a wrong word, an estimator node, a deterministic launch. Its resolution on a
cluster: tests/ray/test_auto_actors.py; a node joining a launch: tests/faults."""

from __future__ import annotations

import pytest

from kestrel.controller._launcher import check_auto_actors
from kestrel_core import ConfigError, Graph, Spec
from kestrel_core.testing.models import GaussPrior, Noise


def graph(num_actors="auto") -> Graph:
    g = Graph().add_node("z", Spec(GaussPrior, {"dim": 2}))
    g.add_node(
        "x",
        Spec(Noise, {"sigma": 1.0}),
        parents=["z"],
        num_actors=num_actors,
        ray={"resources": {"sim": 1}},
    )
    return g


def test_auto_is_read_and_written_back():
    g = graph()
    assert g.nodes["x"].auto_actors and g.nodes["x"].num_actors == 1
    assert "num_actors: auto" in g.to_yaml()
    assert "actors: auto" in g.describe()
    assert not graph(3).nodes["x"].auto_actors and "num_actors: 3" in graph(3).to_yaml()


def test_another_word_names_the_key_and_what_it_takes():
    with pytest.raises(
        ConfigError, match=r"graph\.x\.num_actors: expected an integer ≥ 1 or 'auto', got 'many'"
    ):
        graph("many")


def test_a_deterministic_launch_refuses_auto_naming_the_node():
    check_auto_actors(graph(), deterministic=False)
    check_auto_actors(graph(2), deterministic=True)
    with pytest.raises(
        ConfigError, match=r"graph\.x\.num_actors: auto: a deterministic launch cannot"
    ):
        check_auto_actors(graph(), deterministic=True)


class FakeDeployed:
    deployed = True

    def __init__(self, g):
        self.graph = g

    def node_actors(self):
        return {"z": [], "x": []}

    def replicas(self, name):
        return 1


def test_the_journal_wait_starts_the_restart_watch_if_no_poll_did(monkeypatch):
    """``LaunchWatch.poll_restarts`` (the journal's ``between_waits``) works before the first
    progress poll: it starts the watch on the deployed graph itself."""
    import logging

    from kestrel.controller import _watch

    polls = []
    monkeypatch.setattr(_watch.RestartWatch, "poll", lambda self, **kw: polls.append(kw))
    monkeypatch.setattr(_watch, "Checkpoint", lambda *a, **kw: None)
    g = graph(2)
    watch = _watch.LaunchWatch(
        lambda state: None, resume=None, log=logging.getLogger("t"), restarts={}, graph=g
    )
    watch.poll_restarts(None)  # not deployed yet: nothing to watch
    assert polls == []
    watch.poll_restarts(FakeDeployed(g))
    assert polls == [{}]
