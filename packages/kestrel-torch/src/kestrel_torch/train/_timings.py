"""Where an estimator's training time goes: seconds and counts per part of an epoch.

:func:`~kestrel_torch.train._fit.fit` and :meth:`~kestrel_torch.Estimator.train` time each part of
their work into the estimator's :class:`Timings` (``FitState.timings``); the estimator's
``status()`` reports them as ``timings`` and a launch writes them to ``RUN/profile.json``.

Parts (names as reported): ``cache_fill`` (the first sync of the training and validation
caches), ``cache_sync`` (later syncs), ``batches`` (drawing a batch from the cache), ``steps``
(loss, backward, optimiser step; a step's count is the number of steps), ``refit`` (the
loss's end-of-epoch refit), ``validation`` (validation losses of the model and of the best
model), ``epoch_end`` (the round schedule's end of epoch: fixing a due round's proposal, and
waiting for a round in a deterministic launch).

Times are wall-clock seconds of the estimator's process (``time.perf_counter``), summed over the
estimator's life in this process (not saved with the weights). Timing costs two clock reads per
part, well under a microsecond against steps of milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Timings"]


class Timings:
    """Seconds and counts per named part.

    Attributes:
        seconds: part → wall-clock seconds (float). counts: part → how many times it ran.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, seconds: float, count: int = 1) -> None:
        """Add ``seconds`` (≥ 0) and ``count`` runs to part ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)
        self.counts[name] = self.counts.get(name, 0) + int(count)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time the ``with`` body into part ``name`` (also when it raises)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def as_dict(self) -> dict[str, dict[str, float]]:
        """``{part: {"seconds": float, "count": int}}``, parts in the order first timed."""
        return {k: {"seconds": v, "count": self.counts.get(k, 0)} for k, v in self.seconds.items()}
