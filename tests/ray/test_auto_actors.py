"""``num_actors: auto`` (issue 32, item 4): the replica count follows the cluster's slots of what
one replica requests (kestrel_ray.graph._auto); the launch's watch starts replicas for a node
that joins. Resolution only here (no cluster of several nodes): the launch on a ``ray start``
cluster that grows is tests/faults/test_auto_actors.py."""

from __future__ import annotations

import logging

import pytest
import ray

from kestrel_core import ConfigError, Graph, KestrelError, Spec
from kestrel_core.testing.models import GaussPrior, Noise
from kestrel_ray.graph._auto import AutoActors, actor_slots, resolve_auto_actors
from kestrel_ray.internal import check_graph_config

from .fakes import SlowEstimator
from .helpers import chain_graph


def node(**ray_options):
    g = Graph()
    g.add_node("z", prior=("kestrel_core.Product", {"priors": [["uniform", 0.0, 1.0]]}))
    g.add_node(
        "x",
        "kestrel_core.testing.models.Megabyte",
        parents=["z"],
        num_actors="auto",
        ray=ray_options,
    )
    return g.nodes["x"]


def test_slots_are_summed_over_nodes_by_the_scarcest_resource():
    assert actor_slots({"sim": 1}, [{"sim": 4, "CPU": 2}, {"CPU": 8}, {"sim": 2.5}]) == 6
    assert actor_slots({"CPU": 2, "sim": 1}, [{"CPU": 8, "sim": 3}, {"CPU": 1, "sim": 9}]) == 3
    assert actor_slots({"GPU": 1}, [{"CPU": 64}]) == 0
    assert actor_slots({"sim": 0.5}, [{"sim": 2}]) == 4


def test_auto_resolves_to_the_slots_of_what_a_replica_requests():
    x = node(resources={"sim": 1})
    assert x.auto_actors and x.num_actors == 1
    assert resolve_auto_actors(x, "x", [{"sim": 3}, {"sim": 2, "CPU": 4}]) == 5
    assert resolve_auto_actors(node(num_cpus=2), "x", [{"CPU": 8}, {"CPU": 3}]) == 5


def test_auto_without_a_request_or_without_a_matching_node_says_what_to_do():
    with pytest.raises(ConfigError, match=r"graph\.x\.num_actors: auto .* requests nothing"):
        resolve_auto_actors(node(), "x", [{"CPU": 8}])
    with pytest.raises(ConfigError, match=r"graph\.x\.num_actors: auto: no node .*sim: 1"):
        resolve_auto_actors(node(resources={"sim": 1}), "x", [{"CPU": 8}])


class FakeDeployed:
    def __init__(self, graph, have):
        self.graph, self.have, self.calls = graph, have, []

    def replicas(self, name):
        return self.have

    def add_replicas(self, name, k):
        self.calls.append(("add", k))
        self.have += k
        return k

    def drop_replicas(self, name, k):
        self.calls.append(("drop", k))
        self.have -= 1  # one of them waits for a node
        return 1


def test_the_watch_starts_replicas_for_a_node_that_joins_and_drops_those_of_one_that_left():
    g = Graph()
    g.add_node("z", prior=("kestrel_core.Product", {"priors": [["uniform", 0.0, 1.0]]}))
    g.add_node(
        "x",
        "kestrel_core.testing.models.Megabyte",
        parents=["z"],
        num_actors="auto",
        ray={"resources": {"sim": 1}},
    )
    cluster = [[{"sim": 2}]]
    dg = FakeDeployed(g, 2)
    watch = AutoActors(dg, logging.getLogger("auto"), every=0.0, nodes=lambda: cluster[0])
    assert watch.poll(force=True) == {"x": 2} and dg.calls == []
    cluster[0] = [{"sim": 2}, {"sim": 3}]  # a node joins
    assert watch.poll(force=True) == {"x": 5} and dg.calls == [("add", 3)]
    cluster[0] = [{"sim": 2}]  # it leaves
    assert watch.poll(force=True) == {"x": 4} and dg.calls[-1] == ("drop", 3)
    assert watch.added == {"x": 3} and watch.dropped == {"x": 1}


def auto_graph():
    graph = chain_graph(2)
    graph.add_node(
        "n2",
        Spec(Noise, {"sigma": 1.0}),
        parents=["n1"],
        num_actors="auto",
        ray={"num_cpus": 0.5},
    )
    return graph


def test_auto_deploys_one_replica_per_slot_and_grows_and_shrinks(deployed):
    dg = deployed(auto_graph(), seed=11, estimators=False)
    assert dg.auto_counts == {"n2": 4}  # 2 CPUs of the session's Ray, 0.5 a replica
    assert dg.replicas("n2") == 4 and len(dg.node_actors()["n2"]) == 4
    trace = dg.sample(8)
    assert dg.to_arrays(trace)["n2.value"].shape == (8, 2)
    assert [s["calls"] for s in ray.get(dg.handle("n2").status_refs())] == [1, 1, 1, 1]
    # a replica more: no CPU left for it, so it waits to start and is not called
    assert dg.add_replicas("n2", 1) == 1 and dg.replicas("n2") == 5
    assert len(dg.node_actors()["n2"]) == 4
    dg.sample(8)
    # the cluster shrank: the replica still starting is stopped; serving ones are Ray's to restart
    assert dg.drop_replicas("n2", 1) == 1 and dg.replicas("n2") == 4
    with pytest.raises(KestrelError, match="not multiplexed"):
        dg.add_replicas("n1", 1)


def test_an_estimator_node_cannot_be_auto(deployed):
    graph = chain_graph(2)
    graph.add_node(
        "t",
        Spec(GaussPrior, {"dim": 2}),
        estimator=Spec(SlowEstimator, {"dim": 2}),
        evidence=["n1"],
        num_actors="auto",
        ray={"num_cpus": 1},
    )
    with pytest.raises(ConfigError, match=r"graph\.t\.num_actors: .*estimator.*num_actors=auto"):
        check_graph_config(graph)
