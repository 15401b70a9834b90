"""Starting a buffer from samples on disk (``buffer.initial_samples_path``).

The path is a ``.npz`` file or a folder of them, in the layout ``kestrel sample prior`` and
``kestrel simulate`` write: one array per node, shape ``(n, *D)``, under the node's name. Each
file enters through :meth:`~kestrel_ray.DeployedGraph.ingest`: every node's actor checks its
values as it checks a simulator's output and adds ``log_prob`` where its simulator has one
(priors), so the appended trace has the keys a prior simulation has and the store keeps one key
schema.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from kestrel_core import ConfigError
from kestrel_ray import RefTrace

if TYPE_CHECKING:
    from kestrel_ray import DeployedGraph

__all__ = ["append_initial_samples", "read_initial_samples"]


def read_initial_samples(path: str) -> list[tuple[str, dict[str, np.ndarray]]]:
    """The ``(file, {node: array})`` pairs under ``path`` (a file or a folder), in name order.

    Raises:
        ConfigError: the path does not exist or holds no ``.npz`` file.
    """
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".npz"))
    elif os.path.isfile(path):
        files = [path]
    else:
        raise ConfigError(f"buffer.initial_samples_path: {path!r} does not exist")
    if not files:
        raise ConfigError(f"buffer.initial_samples_path: no .npz file in {path!r}")
    out = []
    for file in files:
        with np.load(file, allow_pickle=False) as data:
            out.append((file, {k: data[k] for k in data.files}))
    return out


def append_initial_samples(dg: DeployedGraph, path: str, append: Callable[[RefTrace], Any]) -> int:
    """Hand the samples under ``path`` to ``append``, one trace per file; returns how many.

    Args:
        dg: the deployed graph (:class:`~kestrel_ray.DeployedGraph`).
        path: a ``.npz`` file or a folder of them.
        append: called with each file's trace (the launch appends it to the store).

    Raises:
        ConfigError: a file lacks a node of the graph, or its arrays disagree on the number of
            samples (the message names the file, the node and the shapes).
        SimulatorError, ShapeError: a node's values are unusable (as a simulator's output
            would be; the message names the node).
    """
    graph = dg.graph
    total = 0
    for file, arrays in read_initial_samples(path):
        missing = [m for m in graph.forward_order if m not in arrays]
        if missing:
            raise ConfigError(
                f"buffer.initial_samples_path: {file!r} has no array for node {missing[0]!r} "
                f"(it holds {sorted(arrays)}; every node is needed)"
            )
        counts = {
            m: int(np.shape(arrays[m])[0]) if np.ndim(arrays[m]) else -1
            for m in graph.forward_order
        }
        n = counts[graph.forward_order[0]]
        if any(c != n for c in counts.values()):
            raise ConfigError(
                f"buffer.initial_samples_path: {file!r}: the nodes hold different numbers of "
                f"samples: {counts}"
            )
        if n == 0:
            continue
        append(dg.ingest({m: arrays[m] for m in graph.forward_order}))
        total += n
    return total
