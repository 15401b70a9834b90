"""Shared helpers of the Ray tests: graphs of the fakes, node actors, reading pending calls."""

from __future__ import annotations

import numpy as np
import ray
from ray import cloudpickle

from kestrel_core import Graph, Spec
from kestrel_core.testing.models import GaussPrior, Noise
from kestrel_ray import Column, NodeHandle, NodeWrapper
from kestrel_ray.graph._actors import import_paths

from .fakes import SlowEstimator


def start_node(track, graph: Graph, name: str, seed: int = 0) -> NodeHandle:
    """One NodeWrapper actor for ``graph[name]`` (killed after the test), ready."""
    actor = track(
        ray.remote(NodeWrapper)
        .options(num_cpus=0)
        .remote(cloudpickle.dumps(graph[name]), seed=seed, import_paths=import_paths())
    )
    info = ray.get(actor.ready.remote())
    return NodeHandle(name, actor, info["fields"])


def put(arr) -> Column:
    """A driver-owned column holding ``arr`` (rows = leading dimension)."""
    arr = np.asarray(arr)
    return Column.whole([(ray.put(arr), arr.shape[0])])


def get(refs):
    """``ray.get`` re-raising the actor's own exception."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as err:
        cause = err.cause
        while isinstance(cause, ray.exceptions.RayTaskError):
            cause = cause.cause
        raise cause from None


def read(pending) -> dict[str, np.ndarray]:
    """The arrays of a pending node call (field → ``(n, …)``), after checking its meta."""
    get(pending.meta_refs)
    out = {}
    for field, col in pending.columns.items():
        parts = [get(ref)[a:b] for ref, a, b in col.segments]
        out[field] = np.concatenate(parts)
    return out


def chain_graph(n_nodes: int = 3, *, dim: int = 2, num_actors: int = 1, chunk: int = 0) -> Graph:
    """``n0 ~ GaussPrior``, ``n{i} = n{i-1} + noise``; the last node may be multiplexed/chunked."""
    g = Graph().add_node("n0", Spec(GaussPrior, {"dim": dim}))
    for i in range(1, n_nodes):
        last = i == n_nodes - 1
        g.add_node(
            f"n{i}",
            Spec(Noise, {"sigma": 1.0}),
            parents=[f"n{i - 1}"],
            num_actors=num_actors if last else 1,
            sample_chunk_size=chunk if last else 0,
        )
    return g


def estimator_graph(*, steps: int = 200, step_s: float = 0.05, dim: int = 2) -> Graph:
    """theta (GaussPrior, SlowEstimator; evidence x, scaffold s) → s → x (observed)."""
    g = Graph()
    g.add_node(
        "theta",
        Spec(GaussPrior, {"dim": dim}),
        estimator=Spec(SlowEstimator, {"steps": steps, "step_s": step_s, "dim": dim}),
        evidence=["x"],
        scaffolds=["s"],
    )
    g.add_node("s", Spec(Noise, {"sigma": 0.1}), parents=["theta"])
    g.add_node("x", Spec(Noise, {"sigma": 0.1}), parents=["s"], observed=np.arange(1.0, dim + 1.0))
    return g


def variant(graph: Graph, *, estimators: bool = True, **fields) -> Graph:
    """A copy of ``graph``; ``fields`` maps node name → dict of Node fields to override."""
    g = Graph(graph.base_dir)
    for name, node in graph.nodes.items():
        kw = dict(
            estimator=node.estimator if estimators else None,
            parents=node.parents,
            evidence=node.evidence,
            scaffolds=node.scaffolds,
            observed=node.observed,
            num_actors=node.num_actors,
            sample_chunk_size=node.sample_chunk_size,
            ray=node.ray,
        )
        kw.update(fields.get(name, {}))
        g.add_node(name, node.simulator, **kw)
    return g
