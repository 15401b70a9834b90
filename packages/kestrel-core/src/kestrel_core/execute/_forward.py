"""In-process forward sampling of a graph: the trace of ``n`` joint draws.

Shape symbols: N samples, D a node's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError, GraphError, KestrelError, ShapeError, SimulatorError
from kestrel_core.config._suggest import unknown
from kestrel_core.execute._boundary import as_record, check_count
from kestrel_core.execute._onerror import SkipLog, simulate_or_skip, skipped_values
from kestrel_core.execute._random import seed_sequence
from kestrel_core.graph._graph import Graph, Node
from kestrel_core.graph._inputs import as_input
from kestrel_core.graph._trace import LOG_PROB, check_trace, flat_key

__all__ = ["sample_forward", "build_simulator"]


def build_simulator(node: Node) -> Any:
    """Build a node's simulator, naming the node when that fails.

    Raises:
        ConfigError: the target cannot be imported (key path ``graph.<node>.simulator``).
        SimulatorError: the constructor raised; the original error is chained and quoted.
    """
    where = f"graph.{node.name}.simulator"
    try:
        return node.simulator.build()
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from err
    except KestrelError:
        raise
    except Exception as err:
        raise SimulatorError(
            f"node {node.name!r}: building simulator {node.simulator.target_name} failed: "
            f"{type(err).__name__}: {err}"
        ) from err


def _conditions(
    graph: Graph, conditions: Mapping[str, Any] | None, n: int
) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, value in (conditions or {}).items():
        if name not in graph:
            raise GraphError(f"conditions: {unknown('node', name, graph.nodes)}")
        arr = as_input(value, f"condition {name!r}", copy=False)  # native, C-contiguous
        if arr.ndim == 0 or arr.shape[0] not in (1, n):
            raise ShapeError(
                f"condition {name!r} has leading dimension "
                f"{arr.shape[0] if arr.ndim else 'none (shape ())'}; expected 1 (broadcast) or {n}"
            )
        arr = np.broadcast_to(arr, (n,) + arr.shape[1:])
        out[name] = np.array(arr, order="C", copy=True)
    return out


def _read_only(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def sample_forward(
    graph: Graph,
    n: int,
    conditions: Mapping[str, Any] | None = None,
    seed: int | np.random.SeedSequence | None = None,
    *,
    chunk_size: int | None = None,
    skipped: SkipLog | None = None,
) -> dict[str, np.ndarray]:
    """Draw ``n`` joint samples of the graph in forward order, in this process.

    Each node's simulator is built once per call and called with its parents' values (in the
    listed order) per chunk of ``sample_chunk_size`` samples (0 = one call). A simulator with a
    ``log_prob(value) -> (N,)`` method (priors) also gives ``"<node>.log_prob"``. Observed
    nodes are simulated too; their observation is checked against the simulated per-sample
    shape once.

    Randomness: the root :func:`~kestrel_core.seed_sequence` of ``seed`` spawns one child per
    node in forward order (conditioned nodes included, so conditioning one node does not shift
    the others' streams), and each child one generator per chunk. The same seed, graph and
    chunking give bit-identical output.

    Args:
        graph: the graph (validated here).
        n: number of samples ≥ 0; ``0`` returns ``{}`` without calling any simulator.
        conditions: node name → array ``(N, *D)`` or ``(1, *D)`` (broadcast); these nodes are
            not simulated, their values are used and returned (expanded to ``N`` rows).
        seed: integer, ``SeedSequence`` or ``None`` (fresh entropy).
        chunk_size: overrides every node's ``sample_chunk_size`` (0 = one call).
        skipped: with a node's ``on_error: skip``, the samples whose simulation raised are
            counted here and dropped from the result (fewer than ``N`` rows); without it they
            stay, holding NaN (0 for integers), as on Ray.

    Returns:
        Flat key → array: ``"<node>.value"`` ``(N, *D)`` for every node, ``"<node>.log_prob"``
        float64 ``(N,)`` where the simulator has ``log_prob``. Arrays are C-contiguous, owned.

    Raises:
        GraphError: the graph is invalid, or a condition names an unknown node.
        ShapeError: a condition's leading dimension is neither 1 nor ``n``; an observation does
            not match its node's per-sample shape; a simulator output is malformed.
        ConfigError, SimulatorError: a simulator cannot be built; errors of simulator calls
            (see :func:`~kestrel_core.call_simulator`) name the node.

    Example:
        >>> g = Graph().add_node("z", {"_target_": "kestrel_core.Product", "priors": [["uniform", 0, 1]]})
        >>> trace = sample_forward(g, 4, seed=0)
        >>> sorted(trace), trace["z.value"].shape
        (['z.log_prob', 'z.value'], (4, 1))
    """
    graph.validate()
    n = check_count(n)
    if chunk_size is not None:
        chunk_size = check_count(chunk_size, "chunk_size")
    fixed = _conditions(graph, conditions, n)
    order = graph.forward_order
    children = seed_sequence(seed).spawn(len(order))
    if n == 0:
        return {}
    values: dict[str, np.ndarray] = {}
    trace: dict[str, np.ndarray] = {}
    raised: dict[str, np.ndarray] = {}  # on_error: skip
    errors: dict[str, int] = {}
    error: dict[str, tuple[str, str]] = {}
    for name, child in zip(order, children):
        node = graph.nodes[name]
        if name in fixed:
            values[name] = trace[flat_key(name)] = fixed[name]
            continue
        simulator = build_simulator(node)
        size = node.sample_chunk_size if chunk_size is None else chunk_size
        size = n if size == 0 else min(size, n)
        bounds = [(a, min(a + size, n)) for a in range(0, n, size)]
        log_prob = getattr(simulator, "log_prob", None)
        attempts = []
        for (a, b), seq in zip(bounds, child.spawn(len(bounds))):
            parents = {p: values[p][a:b] for p in node.parents}
            rng = np.random.Generator(np.random.PCG64(seq))  # as spawn_rngs
            attempts.append(
                simulate_or_skip(
                    name, simulator, b - a, parents, rng=rng, seq=seq, on_error=node.on_error
                )
            )
        chunks, first = skipped_values(name, attempts)
        if first is not None:
            raised[name] = np.concatenate([t.raised for t in attempts])
            errors[name], error[name] = int(raised[name].sum()), first
        log_probs: list[np.ndarray] = []
        for value in chunks if callable(log_prob) else ():
            out = {LOG_PROB: log_prob(_read_only(value))}  # type: ignore[misc]  # callable
            rec = as_record(name, "log_prob", out, len(value), fields=(LOG_PROB,))
            log_probs.append(rec[LOG_PROB])
        value = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        if node.observed is not None:  # (1, *D) becomes D here, with a warning
            graph.fit_observation(name, value.shape[1:])
        values[name] = trace[flat_key(name)] = value
        if log_probs:
            trace[flat_key(name, LOG_PROB)] = (
                log_probs[0] if len(log_probs) == 1 else np.concatenate(log_probs)
            )
    check_trace(trace, n)
    if skipped is not None:
        keep = skipped.add(_Raised(n, errors, error, raised))
        if keep is not None:
            trace = {k: np.ascontiguousarray(v[keep]) for k, v in trace.items()}
    return trace


class _Raised:
    """The samples of a :func:`sample_forward` call that raised, as :meth:`SkipLog.add` reads."""

    def __init__(self, n: int, errors: dict, error: dict, raised: dict):
        self.n, self.errors, self.error, self.raised = n, errors, error, raised
