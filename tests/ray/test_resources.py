"""K16: impossible resource requests and broken constructors fail fast, naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import ConfigError, KestrelError, Spec
from kestrel_core.testing.models import Noise
from kestrel_ray import DeployedGraph

from .fakes import DyingWrapper
from .helpers import chain_graph, estimator_graph, variant


def refuses(graph, match):
    dg = DeployedGraph(graph)
    with pytest.raises(ConfigError, match=match):
        dg.deploy()
    assert dg.actors == [] and dg.store is None  # nothing was started


def test_k16_more_gpus_than_the_cluster_has():
    refuses(
        variant(chain_graph(2), n1={"ray": {"num_gpus": 2}}),
        r"node 'n1' requests 2 GPUs; the cluster has 0",
    )


def test_k16_custom_resource_nobody_offers():
    refuses(
        variant(chain_graph(2), n1={"ray": {"resources": {"tpu_pod": 1}}}),
        r"node 'n1' requests 1 of resource 'tpu_pod'; the cluster has 0",
    )


def test_k16_replicas_together_ask_for_more_than_the_cluster():
    refuses(
        variant(chain_graph(2), n1={"ray": {"num_cpus": 1.5}, "num_actors": 2}),
        r"request 3 CPUs in total \(n1: 2 × 1\.5\); the cluster has 2",
    )


def test_k16_ensemble_members_together_ask_for_more_than_the_cluster():
    # every member of `ensemble: K` is an actor with the node's `ray` options: four members of
    # one CPU each cannot start on two CPUs, refused before any actor (not a member's timeout)
    g = estimator_graph()
    spec = g.nodes["theta"].estimator
    ensemble = Spec(spec.target, {**spec.kwargs, "ensemble": 4})
    refuses(
        variant(g, theta={"estimator": ensemble, "ray": {"num_cpus": 1}}),
        r"request 4 CPUs in total \(theta: 4 × 1\); the cluster has 2",
    )


def test_k16_simulator_kwarg_typo_names_node_and_original_error():
    graph = chain_graph(1).add_node("x", Spec(Noise, {"sigmaa": 0.1}), parents=["n0"])
    dg = DeployedGraph(graph)
    with pytest.raises(
        KestrelError, match=r"node 'x'.*TypeError.*unexpected keyword argument 'sigmaa'"
    ):
        dg.deploy()
    assert dg.actors == []


def test_actor_dying_in_its_constructor_is_reported_with_its_error():
    class Dying(DeployedGraph):
        wrapper_cls = DyingWrapper

    dg = Dying(chain_graph(1))
    with pytest.raises(
        KestrelError, match=r"node 'n0'.*RuntimeError: boom in the actor constructor"
    ):
        dg.deploy()
    assert dg.actors == []


def test_five_nodes_and_the_store_run_on_two_cpus_by_default(deployed):
    dg = deployed(chain_graph(5), seed=0)
    assert dg.to_arrays(dg.sample(4))["n4.value"].shape == (4, 2)
    assert np.isfinite(dg.to_arrays(dg.sample(4))["n4.value"]).all()
