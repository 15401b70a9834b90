"""Graph structure as pure functions on node names: checks, forward and inference order.

Works on any mapping ``name -> node`` whose values have ``parents``, ``evidence``,
``scaffolds`` (tuples of names), ``estimator`` (or ``None``) and ``observed`` (or ``None``),
so the config loader and :class:`~kestrel_core.Graph` share one implementation.

Orders are topological sorts (Kahn's algorithm) that break ties in config order, so they are
deterministic and stable under edits elsewhere in the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kestrel_core._errors import GraphError
from kestrel_core.config._suggest import key_path, unknown

__all__ = [
    "structure_problems",
    "forward_order",
    "inference_order",
    "find_cycle",
    "is_identifier_name",
]

_EDGES = ("parents", "evidence", "scaffolds")


def is_identifier_name(name: Any) -> bool:
    """Node names are Python identifiers (hence no dots, no spaces, not empty)."""
    return isinstance(name, str) and name.isidentifier()


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """Return one cycle ``[a, b, …, a]`` of the dependency graph, or ``None``.

    Args:
        deps: node → the nodes it depends on (names missing from ``deps`` are ignored).
    """
    state: dict[str, int] = {}  # 1 on stack, 2 done
    for start in deps:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        state[start] = 1
        while stack:
            node, i = stack[-1]
            targets = [d for d in deps.get(node, ()) if d in deps]
            if i < len(targets):
                stack[-1] = (node, i + 1)
                nxt = targets[i]
                if state.get(nxt) == 1:
                    return path[path.index(nxt) :] + [nxt]
                if not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


def _toposort(names: Sequence[str], deps: Mapping[str, Sequence[str]], what: str) -> list[str]:
    order: list[str] = []
    placed: set[str] = set()
    remaining = list(names)
    while remaining:
        for name in remaining:
            if all(d in placed or d not in deps for d in deps[name]):
                order.append(name)
                placed.add(name)
                remaining.remove(name)
                break
        else:
            cycle = find_cycle({n: deps[n] for n in remaining}) or remaining
            raise GraphError(f"graph: cycle in {what}: {' -> '.join(cycle)}")
    return order


def forward_order(nodes: Mapping[str, Any]) -> list[str]:
    """Topological order of the ``parents`` edges, ties broken by config order.

    Raises:
        GraphError: the parents form a cycle (the message names it, ``a -> b -> a``).
    """
    deps = {name: tuple(node.parents) for name, node in nodes.items()}
    return _toposort(list(nodes), deps, "parents")


def _is_latent(node: Any) -> bool:
    return node.estimator is not None or bool(node.evidence)


def inference_deps(nodes: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The nodes run at inference and what each one needs first.

    The set starts with every observed node and every node with an estimator or evidence;
    then every evidence target not yet in it is added together with its parents, recursively
    up to nodes already in the set — the deterministic intermediates (e.g. a summary computed
    from ``x``). Observed nodes need nothing, latent nodes need their evidence (scaffolds are
    training-only and not needed), intermediates need their parents.

    Returns:
        node → dependencies, in config order.
    """
    chosen = {n for n, node in nodes.items() if node.observed is not None or _is_latent(node)}
    queue = [e for n in nodes if n in chosen for e in nodes[n].evidence]
    while queue:
        name = queue.pop(0)
        if name in chosen or name not in nodes:
            continue
        chosen.add(name)
        queue.extend(nodes[name].parents)
    deps: dict[str, tuple[str, ...]] = {}
    for name, node in nodes.items():
        if name not in chosen:
            continue
        if node.observed is not None:
            deps[name] = ()
        elif _is_latent(node):
            deps[name] = tuple(node.evidence)
        else:
            deps[name] = tuple(node.parents)
    return deps


def inference_order(nodes: Mapping[str, Any]) -> list[str]:
    """Observed nodes, then latents after their evidence, with the intermediates between them.

    Example (05): ``theta(evidence x, scaffolds mu)``, ``mu(parents theta)``,
    ``x(parents mu, observed)`` → ``["x", "theta"]``.

    Raises:
        GraphError: a latent's evidence depends on the latent itself without an observed node
            in between (the message names the cycle).
    """
    deps = inference_deps(nodes)
    cycle = find_cycle(deps)
    if cycle is not None:
        # a → b with b among a's evidence: b is needed as data, so it must be observed
        unobserved = sorted(
            {
                f"evidence {b!r} of node {a!r} has no observation (set graph.{b}.observed)"
                for a, b in zip(cycle, cycle[1:])
                if b in nodes[a].evidence and nodes[b].observed is None
            }
        )
        path = " -> ".join(cycle)
        if unobserved:  # the usual cause: a forgotten `observed:`, named first
            raise GraphError(
                f"graph: {'; '.join(unobserved)}: an estimator's evidence must be observed "
                f"(without it, inference order has the cycle {path})"
            )
        raise GraphError(f"graph: cycle in inference (evidence) order: {path}")
    return _toposort(list(deps), deps, "inference (evidence) order")


def structure_problems(nodes: Mapping[str, Any]) -> list[str]:
    """Every structural problem of a graph, one message each, with full key paths.

    Checks node names (identifiers without dots), references in parents / evidence /
    scaffolds (unknown with a suggestion, self-reference, duplicates), an estimator on a node
    without evidence, an observed node with an estimator, and cycles of the forward and the
    inference order.
    """
    problems: list[str] = []
    names = list(nodes)
    for name, node in nodes.items():
        if not is_identifier_name(name):
            problems.append(
                f"{key_path('graph', str(name))}: node name {name!r} must be an identifier "
                "(letters, digits, '_'; no '.')"
            )
        for edge in _EDGES:
            seen: set[str] = set()
            for i, ref in enumerate(getattr(node, edge)):
                where = key_path("graph", name, edge, i)
                if ref not in nodes:
                    problems.append(f"{where}: {unknown('node', ref, names)}")
                elif ref == name:
                    problems.append(f"{where}: node {name!r} cannot list itself in {edge}")
                elif ref in seen:
                    problems.append(f"{where}: {ref!r} is listed twice")
                seen.add(ref)
        if node.estimator is not None and not node.evidence:
            problems.append(
                f"{key_path('graph', name, 'estimator')}: node {name!r} has an estimator but no "
                "evidence (add 'evidence: [<observed node>]' or remove the estimator)"
            )
        if node.estimator is not None and node.observed is not None:
            problems.append(
                f"{key_path('graph', name, 'observed')}: node {name!r} is observed and has an "
                "estimator; an observed node is data, not a latent"
            )
    if problems:
        return problems
    for order in (forward_order, inference_order):
        try:
            order(nodes)
        except GraphError as err:
            problems.append(str(err))
    return problems
