"""Which node calls a graph operation makes, and with which conditions (pure, no Ray).

A *plan* is a list of ``(node, method)`` calls in submission order; ``method`` is ``"sample"``
(the simulator, from the parents' values) or ``"sample_posterior"`` / ``"sample_proposal"``
(the estimator, from the evidence and available scaffolds). :class:`~kestrel_ray.DeployedGraph`
submits a plan node by node, each call conditioned on the columns known so far.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TypeVar

from kestrel_core import EstimatorError, Graph, GraphError

__all__ = ["forward_plan", "inference_plan", "resimulation_plan", "call_conditions"]

Plan = list[tuple[str, str]]
C = TypeVar("C")


def forward_plan(graph: Graph) -> Plan:
    """Every node's simulator in forward order (latent roots from their priors)."""
    return [(name, "sample") for name in graph.forward_order]


def inference_plan(graph: Graph, method: str, observed: Iterable[str] = ()) -> Plan:
    """``method`` for every node in inference order that is not observed.

    Args:
        graph: the graph.
        method: ``"sample_posterior"`` or ``"sample_proposal"``.
        observed: nodes observed besides the graph's own observations.
    """
    skip = set(graph.observations) | set(observed)
    return [(name, method) for name in graph.inference_order if name not in skip]


def resimulation_plan(
    graph: Graph, method: str, latents: Collection[str], observed: Iterable[str] = ()
) -> Plan:
    """The latents by ``method`` (inference order), then every other node simulated from them."""
    plan = inference_plan(graph, method, observed)
    return plan + [(name, "sample") for name in graph.forward_order if name not in latents]


def call_conditions(
    graph: Graph, name: str, method: str, *, latent: bool, known: Mapping[str, C]
) -> dict[str, C]:
    """The conditions of one planned call, taken from the columns ``known`` so far.

    Args:
        graph: the graph.
        name: the node called.
        method: its method.
        latent: whether the node has a deployed estimator.
        known: node → its latest column (observations and the calls submitted before).

    Returns:
        condition node → column: the parents for ``sample`` (and nodes without estimator), the
        evidence plus every known scaffold for an estimator method.

    Raises:
        EstimatorError: an estimator method for a node with evidence but no estimator deployed.
        GraphError: a needed condition has no column yet.
    """
    node = graph[name]
    estimating = method != "sample" and latent
    if method != "sample" and node.evidence and not estimating:
        raise EstimatorError(
            f"node {name!r} has evidence but no estimator deployed; {method} cannot draw it"
        )
    need = node.evidence if estimating else node.parents
    lacking = [c for c in need if c not in known]
    if lacking:
        raise GraphError(
            f"node {name!r}: {method} needs {lacking[0]!r}, which has no value here "
            f"(observed: {sorted(graph.observations)})"
        )
    conds = {c: known[c] for c in need}
    if estimating:
        conds.update({c: known[c] for c in node.scaffolds if c in known})
    return conds
