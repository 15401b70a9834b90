"""Does a simulator draw its noise from the ``rng`` Kestrel passes? Checked by the dry run.

Two faults, one cause: a simulator that draws its noise from a generator of its own instead of
the ``rng`` argument.

* **Not reproducible**: its generator is unseeded (``np.random.default_rng()``, numpy's global
  ``np.random.standard_normal``), so ``--seed`` is meaningless: two runs with one seed differ.
* **The same noise everywhere**: its generator is seeded in its own code or config
  (``np.random.default_rng(42)``), so it returns the same output for different rngs — every
  replica of the node (``num_actors``) and every round repeat each other's noise, silently.

:func:`rng_problem` calls the simulator again on the first dry-run draw and compares:

* one extra sample with a generator seeded as the dry run's was: its row is compared with the
  first row of the dry run's output (equal for a simulator that fills its draws row by row, or
  has no noise); when they differ (a simulator whose first row depends on ``n``, or one that
  ignores the ``rng``), one more one-sample call with the same seed settles reproducibility;
* a simulator that drew from the ``rng`` during that call (the generator's state moved) is done:
  its noise follows the ``rng``. One that did not (it takes no ``rng``, or ignores it) is either
  deterministic — a pure function of its parents, which is fine — or seeds its own generator.
  One more call of two samples, both on the first draw's parents and with a generator seeded
  differently, tells them apart: a seeded-by-itself simulator returns two different samples
  (its noise) whose first equals the one drawn under the other generator; a deterministic one
  returns two equal samples and is left alone.

So the check costs one sample, two at most, for a simulator that draws from its ``rng``, and
three for one that does not. A per-sample ``simulate`` that reseeds its generator on every
call returns the same value for the same parents, as a pure function does, and is not told
apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core import Graph, ReproducibilityWarning, call_simulator

__all__ = [
    "rng_problem",
    "rng_message",
    "UNREPRODUCIBLE",
    "SAME_FOR_ANY_RNG",
    "unreproducible_message",
    "same_noise_message",
    "warn_unreproducible",
    "ReproducibilityWarning",
]

#: :func:`rng_problem`'s answer for a simulator whose output differs under one seed
UNREPRODUCIBLE = "unreproducible"
#: :func:`rng_problem`'s answer for a random simulator whose output does not follow the rng
SAME_FOR_ANY_RNG = "same for any rng"

#: the spawn key appended to a call's seed for the differently seeded call
_OTHER = 0x0E57_12E1


def unreproducible_message(name: str, target: str) -> str:
    """The warning for node ``name`` (``_target_`` ``target``) that differs under one seed."""
    return (
        f"node {name!r} ({target}) is not reproducible for a fixed rng: draw its noise from the "
        "rng argument (simulate_batch(n, theta, rng)) so that --seed reproduces a run"
    )


def same_noise_message(name: str, target: str) -> str:
    """The warning for node ``name`` (``_target_`` ``target``) whose random output is the same
    for any rng (it seeds a generator of its own)."""
    return (
        f"node {name!r} ({target}) returns the same output for different rngs although its "
        "samples are random: it draws its noise from a generator seeded in its own code or "
        "config, so its replicas (num_actors) and rounds repeat each other's noise; draw the "
        "noise from the rng argument (simulate_batch(n, theta, rng)), which Kestrel seeds "
        "differently for every call from --seed"
    )


def rng_message(problem: str, name: str, target: str) -> str:
    """The warning for a :func:`rng_problem` answer."""
    if problem == SAME_FOR_ANY_RNG:
        return same_noise_message(name, target)
    return unreproducible_message(name, target)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # a dtype without NaN
        return bool(np.array_equal(a, b))


def _other(seq: np.random.SeedSequence) -> np.random.SeedSequence:
    """A seed unlike ``seq`` and unlike any of its spawned children (the run's streams)."""
    return np.random.SeedSequence(
        seq.entropy, spawn_key=(*seq.spawn_key, _OTHER), pool_size=seq.pool_size
    )


class _Call:
    """A call on the first row of the parents (repeated ``rows`` times) with ``PCG64(seq)``;
    ``drew`` says whether the simulator moved the generator's state."""

    def __init__(
        self,
        node: str,
        simulator: Any,
        parents: Mapping[str, np.ndarray],
        seq: np.random.SeedSequence,
        rows: int = 1,
    ) -> None:
        rng = np.random.Generator(np.random.PCG64(seq))
        before = rng.bit_generator.state
        firsts = {p: np.asarray(v)[:1] for p, v in parents.items()}
        self.value = call_simulator(node, simulator, rows, firsts, rng=rng)
        self.drew = rng.bit_generator.state != before


def rng_problem(
    node: str,
    simulator: Any,
    parents: Mapping[str, np.ndarray],
    seq: np.random.SeedSequence,
    reference: np.ndarray | None = None,
) -> str | None:
    """What is wrong with how the simulator draws its noise, if anything.

    Args:
        node: node name. simulator: the node's simulator (built).
        parents: name → ``(n, *D_p)`` (or ``(1, *D_p)``) inputs; only their first row is used.
        seq: the seed of the calls (each call gets a fresh ``PCG64(seq)`` generator).
        reference: ``(n, *D)``, the output of a call on ``parents`` with ``PCG64(seq)``, when
            there was one (the dry run's): its first row saves one call.

    Returns:
        :data:`UNREPRODUCIBLE` when two identically seeded one-sample calls disagree;
        :data:`SAME_FOR_ANY_RNG` when the simulator does not draw from the ``rng`` (takes none,
        or leaves it untouched), its output is the same under a differently seeded one, and
        two samples on the same parents differ (random, so seeded by itself); else ``None``.
        A call that raises leaves the question open (``None``); the caller's own call reports
        errors.
    """
    try:
        first = _Call(node, simulator, parents, seq)
        if reference is None or not _same(first.value, np.asarray(reference)[:1]):
            if not _same(first.value, _Call(node, simulator, parents, seq).value):
                return UNREPRODUCIBLE
        if first.drew:
            return None  # its noise follows the rng
        pair = _Call(node, simulator, parents, _other(seq), rows=2).value
        if not _same(pair[:1], first.value):
            return None  # its output follows the rng after all (or its first row depends on n)
        return None if _same(pair[0], pair[1]) else SAME_FOR_ANY_RNG  # random, or a function
    except Exception:
        return None


def warn_unreproducible(graph: Graph, values: Mapping[str, np.ndarray], seed: int = 0) -> list[str]:
    """Check every node of ``graph`` (not ``dry_run: false``) on the first row of ``values``.

    For ``kestrel simulate``, which has no dry run: each node gets the calls of
    :func:`rng_problem` on its parents' first simulated row.

    Args:
        graph: the graph. values: node → ``(n, *D)`` simulated values (a forward trace).
        seed: the seed of the calls.

    Returns:
        The warnings issued (:class:`ReproducibilityWarning`), one per node whose noise does
        not follow its rng.
    """
    import warnings

    from kestrel_core.internal import build_simulator

    found = []
    for name in graph.forward_order:
        node = graph.nodes[name]
        if not node.dry_run or any(p not in values for p in node.parents):
            continue
        parents = {p: values[p] for p in node.parents}
        problem = rng_problem(name, build_simulator(node), parents, np.random.SeedSequence(seed))
        if problem is not None:
            found.append(rng_message(problem, name, node.simulator.target_name))
            warnings.warn(ReproducibilityWarning(found[-1]), stacklevel=2)
    return found
