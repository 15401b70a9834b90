"""Reproducible randomness from one ``numpy.random.SeedSequence`` per run.

The scheme (every package follows it, so a seed reproduces a run bit for bit):

1. the run's seed becomes one root :class:`numpy.random.SeedSequence` (:func:`seed_sequence`);
2. the root spawns one child per node, in the graph's forward order;
3. each node's child spawns one grandchild per call/chunk, in call order, and that
   grandchild seeds the ``numpy.random.Generator`` (PCG64) the chunk draws from
   (:func:`spawn_rngs`).

Spawned children are statistically independent streams (NumPy's documented way to seed
parallel work), so chunking, replica count and scheduling order do not change the streams as
long as chunks are numbered the same way. ``SeedSequence.spawn`` is stateful: spawning again
from the same sequence gives *new* children, which is what successive calls want.
"""

from __future__ import annotations

import numbers

import numpy as np

from kestrel_core._errors import ConfigError
from kestrel_core.execute._boundary import check_count

__all__ = ["seed_sequence", "spawn_rngs"]


def seed_sequence(seed: int | np.random.SeedSequence | None) -> np.random.SeedSequence:
    """The root sequence of a run.

    Args:
        seed: a non-negative integer, an existing sequence (returned as is), or ``None`` for
            fresh OS entropy (``seq.entropy`` then records it, so the run can be repeated).

    Returns:
        A :class:`numpy.random.SeedSequence`.

    Raises:
        ConfigError: ``seed`` is negative, a bool, a float or another type.

    Example:
        >>> seed_sequence(7).entropy
        7
    """
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer or None, got {seed!r}")
    return np.random.SeedSequence(int(seed))


def spawn_rngs(seq: np.random.SeedSequence | int | None, k: int) -> list[np.random.Generator]:
    """Spawn ``k`` independent generators (PCG64) from ``seq``.

    Args:
        seq: the parent sequence (an int or ``None`` goes through :func:`seed_sequence`).
        k: number of generators (≥ 0).

    Returns:
        ``k`` generators seeded by ``seq.spawn(k)``, in order.

    Raises:
        ConfigError: invalid ``seq``.
        TypeError, ValueError: ``k`` is not a non-negative integer.

    Example:
        >>> a = spawn_rngs(seed_sequence(1), 2)
        >>> b = spawn_rngs(seed_sequence(1), 2)
        >>> bool(a[1].random() == b[1].random())
        True
    """
    k = check_count(k, "k")
    parent = seq if isinstance(seq, np.random.SeedSequence) else seed_sequence(seq)
    return [np.random.Generator(np.random.PCG64(child)) for child in parent.spawn(k)]
