"""Is a simulator reproducible for a fixed ``rng``? Checked by the dry run.

A simulator that draws its noise from its own generator (``np.random.default_rng()``,
``np.random.standard_normal``) instead of the ``rng`` argument makes ``--seed`` meaningless:
two runs with the same seed differ. :func:`unreproducible` calls the simulator again on the
first dry-run draw with a generator seeded as the dry run's was and compares:

* one extra sample: the first row of the dry run's output is compared with the output of a
  one-sample call on the first row of the inputs (equal for a simulator that fills its draws
  row by row, or has no noise);
* when they differ (a simulator whose first row depends on ``n``, or one that ignores the
  ``rng``), one more one-sample call with the same seed settles it.

So the check costs one sample, two at most, whatever the simulator's price per sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core import ReproducibilityWarning, call_simulator

__all__ = ["unreproducible", "unreproducible_message", "ReproducibilityWarning"]


def unreproducible_message(name: str, target: str) -> str:
    """The warning for node ``name`` (``_target_`` ``target``)."""
    return (
        f"node {name!r} ({target}) is not reproducible for a fixed rng: draw its noise from the "
        "rng argument (simulate_batch(n, theta, rng)) so that --seed reproduces a run"
    )


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # a dtype without NaN
        return bool(np.array_equal(a, b))


def _once(node: str, simulator: Any, parents: Mapping[str, np.ndarray], seq: Any) -> np.ndarray:
    rng = np.random.Generator(np.random.PCG64(seq))
    firsts = {p: np.asarray(v)[:1] for p, v in parents.items()}
    return call_simulator(node, simulator, 1, firsts, rng=rng)


def unreproducible(
    node: str,
    simulator: Any,
    parents: Mapping[str, np.ndarray],
    seq: np.random.SeedSequence,
    reference: np.ndarray | None = None,
) -> bool:
    """Whether the simulator gives different outputs for identically seeded generators.

    Args:
        node: node name. simulator: the node's simulator (built).
        parents: name → ``(n, *D_p)`` (or ``(1, *D_p)``) inputs; only their first row is used.
        seq: the seed of the calls (each call gets a fresh ``PCG64(seq)`` generator).
        reference: ``(n, *D)``, the output of a call on ``parents`` with ``PCG64(seq)``, when
            there was one (the dry run's): its first row saves one call.

    Returns:
        ``True`` when two identically seeded one-sample calls disagree. A call that raises
        leaves the question open (``False``); the caller's own call reports errors.
    """
    try:
        first = _once(node, simulator, parents, seq)
        if reference is not None and _same(first, np.asarray(reference)[:1]):
            return False
        return not _same(first, _once(node, simulator, parents, seq))
    except Exception:
        return False


def warn_unreproducible(graph: Any, values: Mapping[str, np.ndarray], seed: int = 0) -> list[str]:
    """Check every node of ``graph`` (not ``dry_run: false``) on the first row of ``values``.

    For ``kestrel simulate``, which has no dry run: each node gets two one-sample calls on its
    parents' first simulated row, with identically seeded generators.

    Args:
        graph: the graph. values: node → ``(n, *D)`` simulated values (a forward trace).
        seed: the seed of the calls.

    Returns:
        The warnings issued (:class:`ReproducibilityWarning`), one per node that disagreed.
    """
    import warnings

    from kestrel_core.internal import build_simulator

    found = []
    for name in graph.forward_order:
        node = graph.nodes[name]
        if not node.dry_run or any(p not in values for p in node.parents):
            continue
        parents = {p: values[p] for p in node.parents}
        if unreproducible(name, build_simulator(node), parents, np.random.SeedSequence(seed)):
            found.append(unreproducible_message(name, node.simulator.target_name))
            warnings.warn(ReproducibilityWarning(found[-1]), stacklevel=2)
    return found
