"""Starting a buffer from samples on disk (``buffer.initial_samples_path``).

The path is a ``.npz`` file or a folder of them, in the layout ``kestrel sample prior`` and
``kestrel simulate`` write: one array per node, shape ``(n, *D)``, under the node's name. The
arrays become one block per file (``ray.put`` on the driver, which owns them), with the same
keys a prior simulation appends: every node's ``value``, plus ``log_prob`` where the node's
simulator has one (priors), computed here — so the store keeps one key schema (K06).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import ray
from kestrel_core import ConfigError, flat_key

from .._refs import Column, RefTrace

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
        with np.load(file) as data:
            out.append((file, {k: data[k] for k in data.files}))
    return out


def append_initial_samples(dg: Any, path: str) -> int:
    """Append the samples under ``path`` to the store of ``dg``; returns how many.

    Raises:
        ConfigError: a file lacks a node of the graph, or its arrays disagree on the number of
            samples (the message names the file, the node and the shapes).
        StoreError: the samples do not fit the store's key schema.
    """
    graph = dg.graph
    priors = {}
    total = 0
    for file, arrays in read_initial_samples(path):
        missing = [m for m in graph.forward_order if m not in arrays]
        if missing:
            raise ConfigError(f"buffer.initial_samples_path: {file!r} has no array for node {missing[0]!r} "
                              f"(it holds {sorted(arrays)}; every node is needed)")
        counts = {m: int(np.shape(arrays[m])[0]) if np.ndim(arrays[m]) else -1 for m in graph.forward_order}
        n = counts[graph.forward_order[0]]
        if any(c != n for c in counts.values()):
            raise ConfigError(f"buffer.initial_samples_path: {file!r}: the nodes hold different numbers of "
                              f"samples: {counts}")
        if n == 0:
            continue
        columns: dict[str, Column] = {}
        meta: dict[str, tuple[tuple[int, ...], str]] = {}
        for m in graph.forward_order:
            value = np.ascontiguousarray(arrays[m])
            fields = {"value": value}
            if "log_prob" in dg.handle(m).fields["sample"]:
                if m not in priors:
                    priors[m] = graph[m].simulator.build()
                fields["log_prob"] = np.asarray(priors[m].log_prob(value), dtype=np.float64)
            for fld, arr in fields.items():
                key = flat_key(m, fld)
                columns[key] = Column.whole([(ray.put(arr), n)])
                meta[key] = (tuple(arr.shape[1:]), arr.dtype.name)
        dg.append(RefTrace(n, columns, meta, {m: 0 for m in graph.forward_order}))
        total += n
    return total
