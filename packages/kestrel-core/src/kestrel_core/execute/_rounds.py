"""Resimulation rounds paced by training: what the driver and a training estimator agree on.

A launch draws its resimulation rounds from the estimators' proposals. Which proposal a round
uses, and when its rows enter training, are fixed by **epochs**, not by the clock:

- round ``k`` (k ≥ 1) draws from the best model as it was at the end of epoch ``k·E`` of the
  current training call (``E = buffer.epochs_per_round``); the estimator marks round ``k``
  :meth:`~Rounds.ready` there and keeps that model for it;
- in **deterministic** mode, training waits at the end of epoch ``(k+1)·E`` until round ``k``
  has been appended (:meth:`~Rounds.appended`), then takes exactly the buffer as it is then
  (the driver appends round ``k+1`` only after every estimator is ready for it, which is
  after that sync), so every epoch trains on the same rows whatever the machine's speed;
- without determinism training never waits: new rows enter the training cache whenever the
  background fetch has them.

While a simulation budget has rounds left (:attr:`~Rounds.open`), early stopping and
``max_epochs`` are held back: training goes on, and the next rounds are drawn from its best
model, until the driver :meth:`~Rounds.close` s the schedule (budget spent or a stop request).

One :class:`Rounds` lives in the node actor of each estimator; the driver's calls reach it
through the actor, the estimator's :meth:`train` gets it as ``rounds=``. Everything here runs
on that actor's event loop (no threads).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kestrel_core._errors import ConfigError

__all__ = ["Rounds"]

_POLL = 0.05  # seconds between checks of a stop request while waiting for a round


class Rounds:
    """The round schedule one estimator trains under.

    Args:
        epochs_per_round: E ≥ 1: a round is due every E epochs of a training call; 0: rounds
            are not paced by epochs (``buffer.simulate_interval`` alone spaces them; each
            draws from the best model at the time).
        deterministic: training waits for round ``k`` at epoch ``(k+1)·E`` (see the module).
        open: rounds may still come that training should wait for instead of early-stopping
            (a simulation budget with simulations left); :meth:`close` ends it.

    Raises:
        ConfigError: ``epochs_per_round`` is not an integer ≥ 0, or 0 with ``deterministic``.
    """

    def __init__(
        self, epochs_per_round: int = 1, *, deterministic: bool = False, open: bool = False
    ):
        if (
            isinstance(epochs_per_round, bool)
            or int(epochs_per_round) != epochs_per_round
            or (int(epochs_per_round) < 0)
        ):
            raise ConfigError(
                f"buffer.epochs_per_round: expected an integer ≥ 0, found {epochs_per_round!r}"
            )
        if int(epochs_per_round) == 0 and deterministic:
            raise ConfigError(
                "buffer.epochs_per_round: 0 (rounds paced by the clock alone) cannot be "
                "deterministic; set epochs_per_round ≥ 1 or deterministic: false"
            )
        self.epochs_per_round = int(epochs_per_round)
        self.deterministic = bool(deterministic)
        self._open = bool(open)
        self._closed = False
        self._ready = 0  # the latest round whose proposal is fixed
        self._appended = 0  # the latest round in the store
        self._finished = False  # training ended: every later round uses the final model
        self._last: int | None = None  # the last round there is, once closed (None: unknown)
        self._changed: asyncio.Event | None = None

    # -- state ---------------------------------------------------------------------------------
    @property
    def open(self) -> bool:
        """True while more rounds may come that should hold back early stopping."""
        return self._open and not self._closed

    @property
    def closed(self) -> bool:
        """True once the driver said no more rounds come."""
        return self._closed

    @property
    def ready_round(self) -> int:
        """The latest round whose proposal is fixed (0: none yet)."""
        return self._ready

    def due(self, epochs: int) -> int | None:
        """The round due at the end of epoch ``epochs`` of a training call (``None``: none)."""
        if self.epochs_per_round and epochs >= 1 and epochs % self.epochs_per_round == 0:
            return epochs // self.epochs_per_round
        return None

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # -- estimator side ------------------------------------------------------------------------
    def ready(self, k: int) -> None:
        """The estimator fixed round ``k``'s proposal (and, deterministic, synced round k-1)."""
        self._ready = max(self._ready, int(k))
        self._notify()

    def finish(self) -> None:
        """Training ended: every round from now on is drawn from the final model at once."""
        self._finished = True
        self._notify()

    async def wait_appended(self, k: int, stop: Callable[[], bool] = lambda: False) -> bool:
        """Wait until round ``k`` is in the store; ``False`` if the schedule closed (or ``stop()``)
        first — no such round will come."""
        while self._appended < k and not stop():
            if self._closed and (self._last is None or self._last < k):
                break  # round k never comes
            try:
                await asyncio.wait_for(self._event().wait(), _POLL)
            except asyncio.TimeoutError:
                pass
        return self._appended >= k

    # -- driver side ---------------------------------------------------------------------------
    async def wait_ready(self, k: int) -> int:
        """Wait until round ``k`` (or a later one) may be drawn; returns the round to draw.

        Deterministic: exactly ``k``. Otherwise the latest ready round ≥ ``k`` (a slow driver
        skips to the newest proposal). After training ended: ``k`` at once.
        """
        while self._ready < k and not self._finished and self.epochs_per_round:
            await self._event().wait()
        if self.deterministic or self._finished:
            return int(k)
        return max(int(k), self._ready)

    def appended(self, k: int, last: bool = False) -> None:
        """Round ``k``'s rows are in the store; ``last``: and no round follows (the budget is
        spent) — said in the same call, so a deterministic estimator learns it at the epoch it
        takes round ``k`` in, whatever the timing."""
        self._appended = max(self._appended, int(k))
        if last:
            self._closed, self._last = True, int(k)
        self._notify()

    def close(self, last: int | None = None) -> None:
        """No more rounds come after round ``last`` (``None``: after whatever was appended —
        a stop): waiting training goes on, early stopping applies again. A round up to
        ``last`` whose append has not arrived yet is still waited for (the two calls may
        reach the actor in either order)."""
        self._closed = True
        if last is not None:
            self._last = int(last) if self._last is None else max(self._last, int(last))
        self._notify()

    def __repr__(self) -> str:
        return (
            f"Rounds(epochs_per_round={self.epochs_per_round}, deterministic={self.deterministic}, "
            f"open={self.open}, ready={self._ready}, appended={self._appended})"
        )
