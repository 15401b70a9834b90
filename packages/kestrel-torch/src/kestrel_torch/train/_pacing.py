"""Training under a round schedule (:class:`kestrel_core.Rounds`): proposals fixed per round,
deterministic cache syncs, discards held until a sync.

:class:`Pacing` is what :func:`~kestrel_torch.train._fit.fit` asks at the end of every epoch. At the
end of epoch ``k·E`` of a training call it fixes round ``k``'s proposal (the best model then,
kept in :class:`ProposalRounds`); in deterministic mode it first waits for round ``k-1`` to be
in the store and syncs every loader to exactly that buffer, with the training's discards sent
just before (so the store's lifecycle rules see them at the same point on every machine).

A schedule that is open when training starts (a simulation budget with rounds to come, and
``budget.stop_early: false``) makes the training call go on past ``max_epochs`` while the rounds
come (:attr:`Pacing.budgeted`); once they stopped, :meth:`Pacing.take_in` brings the store's last
rows into the caches, and one more epoch trains on those no epoch trained on yet (issue 31
item 4: every budgeted simulation reaches training).

Without a schedule (a direct ``train(view)`` call) nothing waits for rounds and every round is
the prior or the current best model; the caches sync every ``cache_sync_every`` epochs, and
since the estimator's loaders then do not prefetch, each such sync takes the store as it is at
that epoch (see ``StepwiseEstimator.train``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kestrel_core import BufferView, Fetch, Rounds
from kestrel_torch.data._loader import CachedDataLoader

__all__ = ["DeferredDiscards", "Pacing", "ProposalRounds"]


class DeferredDiscards:
    """A store view whose :meth:`discard` s wait for :meth:`flush` (deterministic training).

    A :class:`kestrel_core.BufferView`: :meth:`fetch` and :meth:`stats` are the wrapped view's.

    Args:
        view: the view to read from and, on :meth:`flush`, to discard on.
    """

    def __init__(self, view: BufferView):
        self._view = view
        self._pending: list[np.ndarray] = []

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
        """The wrapped view's ``fetch`` (checkout, batched reads, release; blocking)."""
        return self._view.fetch(statuses, keys, max_samples=max_samples, held_ids=held_ids)

    def stats(self) -> dict[str, int]:
        """The wrapped view's ``stats`` (the store's counts)."""
        return self._view.stats()

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Remember ``ids`` (int64) to mark DISFAVOURED at the next :meth:`flush`."""
        self._pending.append(np.asarray(ids, dtype=np.int64).reshape(-1))

    def flush(self) -> int:
        """Send the remembered ids in one ``discard`` call; returns how many ids were sent.

        The call is issued from this process before any later checkout of its loaders, so the
        store applies it first."""
        if not self._pending:
            return 0
        ids = np.unique(np.concatenate(self._pending))
        self._pending = []
        self._view.discard(ids)
        return int(ids.size)


class ProposalRounds:
    """The model each round's proposal draws from.

    A round maps to the best model at its epoch, or to ``None`` (prior draws: no model yet,
    ``prior_epochs`` not reached, or γ = 0). Rounds older than the newest one asked for are
    dropped, so at most a few models are held (references, not copies: the best model is
    replaced, never changed in place).
    """

    def __init__(self) -> None:
        self._models: dict[int, Any] = {}

    def fix(self, k: int, model: Any) -> None:
        """Round ``k`` draws from ``model`` (``None``: the prior)."""
        self._models[int(k)] = model

    def has(self, k: int) -> bool:
        """True if round ``k``'s model is fixed."""
        return int(k) in self._models

    def model(self, k: int) -> Any:
        """Round ``k``'s model (``None``: the prior); older rounds are forgotten.

        Raises:
            KeyError: round ``k`` is not fixed.
        """
        k = int(k)
        model = self._models[k]
        for old in [r for r in self._models if r < k]:
            del self._models[old]
        return model

    def clear(self) -> None:
        """Forget every round (a new training call starts counting rounds from 1)."""
        self._models.clear()


class Pacing:
    """What one training call does at the end of each epoch under a round schedule.

    Args:
        rounds: the schedule, or ``None`` (no rounds: never waits, syncs every
            ``cache_sync_every`` epochs as without a schedule).
        fix: called with round ``k`` to fix its proposal (the estimator's best model now).
        loaders: the training and validation loaders, synced together in deterministic mode.
        discards: the training view's held discards (deterministic mode), else ``None``.
        stop: ``True`` when training is asked to stop (waits end at once).
    """

    def __init__(
        self,
        rounds: Rounds | None,
        fix: Callable[[int], None],
        loaders: Sequence[CachedDataLoader],
        discards: DeferredDiscards | None,
        stop: Callable[[], bool],
    ):
        self.rounds = rounds
        self._fix = fix
        self._loaders = list(loaders)
        self._discards = discards
        self._stop = stop
        # deterministic: what the schedule said at the last round taken in (see epoch_end)
        self._hold = rounds is not None and rounds.open
        self._budgeted = self._hold

    @property
    def periodic_sync(self) -> bool:
        """Sync caches every ``cache_sync_every`` epochs (False: only at rounds, deterministic)."""
        return self.rounds is None or not self.rounds.deterministic

    @property
    def hold_early_stop(self) -> bool:
        """Rounds are still coming (a budget with simulations left): do not stop early.

        Deterministic: as the schedule stood when the latest round was taken in (the driver
        marks the last round as such when it appends it), so it changes at the same epoch on
        every machine; otherwise as it stands now."""
        if self.rounds is not None and self.rounds.deterministic:
            return self._hold
        return self.rounds is not None and self.rounds.open

    @property
    def budgeted(self) -> bool:
        """The schedule was open when training started: a budget's rounds were to come, each of
        whose rows must reach training before it ends (see :meth:`take_in`)."""
        return self._budgeted

    async def take_in(self) -> bool:
        """Bring every row the store holds now into the caches (two blocking syncs of each
        loader: the first applies a fetch that may predate the latest append); the held
        discards are sent first. True when the training cache holds ids it did not before.

        Called once the schedule closed (every budgeted round is in the store), so that the
        last rounds' rows are trained on before training ends, whatever ``max_epochs``."""
        if self._discards is not None:
            self._discards.flush()
        before = self._loaders[0].ids if self._loaders else None
        for loader in self._loaders:
            await asyncio.to_thread(loader.sync, True)
            await asyncio.to_thread(loader.sync, True)
        if before is None:
            return False
        return bool(np.setdiff1d(self._loaders[0].ids, before, assume_unique=True).size)

    async def epoch_end(self, epochs: int) -> bool:
        """At the end of epoch ``epochs`` of this call: fix the round due (if any), and in
        deterministic mode first take the previous round into the caches.

        Returns:
            True when new rows entered the caches here.
        """
        rounds = self.rounds
        if rounds is None:
            return False
        k = rounds.due(epochs)
        if k is None:
            return False
        synced = False
        if rounds.deterministic and k >= 2 and await rounds.wait_appended(k - 1, self._stop):
            if self._discards is not None:
                self._discards.flush()
            for loader in self._loaders:
                # the first wait applies a fetch that may predate the append; the second
                # reads the store as it is now (round k-1 in, round k not yet drawn)
                await asyncio.to_thread(loader.sync, True)
                await asyncio.to_thread(loader.sync, True)
            synced = True
        if rounds.deterministic and k >= 2:
            self._hold = rounds.open
        self._fix(k)
        rounds.ready(k)
        return synced

    def finish(self) -> None:
        """Training ended: later rounds draw from the final model without waiting."""
        if self.rounds is not None:
            self.rounds.finish()
