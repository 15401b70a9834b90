"""The seed of each launch of a run (:func:`launch_seed`): launch 1 uses the run's seed itself,
launch ``k ≥ 2`` its own root sequence ``SeedSequence(seed, spawn_key=(LAUNCH_KEY, k - 1))``.

Here, below the session that seeds a launch's graph with it and the controller's
:mod:`~kestrel.controller._resume` that documents the streams (which re-exports both).
"""

from __future__ import annotations

import numpy as np

__all__ = ["LAUNCH_KEY", "launch_seed"]

#: first entry of the spawn key of a later launch's root sequence ("kest")
LAUNCH_KEY = 0x6B657374


def launch_seed(seed: int, launch: int | None) -> int | np.random.SeedSequence:
    """The root of launch ``launch`` (1-based) of a run with ``seed``.

    Launch 1 (and ``None``: no recorded launch) uses the seed itself, so a first launch draws
    what it always drew; launch ``k ≥ 2`` gets its own root sequence.

    Example:
        >>> launch_seed(7, 1)
        7
        >>> launch_seed(7, 3).spawn_key == (LAUNCH_KEY, 2)
        True
    """
    if launch is None or int(launch) <= 1:
        return int(seed)
    return np.random.SeedSequence(int(seed), spawn_key=(LAUNCH_KEY, int(launch) - 1))
