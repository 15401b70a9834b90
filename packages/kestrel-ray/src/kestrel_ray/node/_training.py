"""The training side of a node actor: train, stop, the round schedule, estimator bytes.

A mixin of :class:`~kestrel_ray.node._wrapper.NodeWrapper` (an async Ray actor). The driver
configures the round schedule (:class:`kestrel_core.Rounds`) before it starts training, then
asks :meth:`TrainingMethods.round_ready` before each resimulation round (the answer names the
round whose proposal the next ``sample_proposal`` call draws from) and reports each round's
append with :meth:`TrainingMethods.round_appended`.
"""

from __future__ import annotations

from typing import Any

from kestrel_core import EstimatorError, Rounds
from kestrel_core.internal import accepts_keyword
from kestrel_ray.store._view import RayBufferView

__all__ = ["TrainingMethods"]


class TrainingMethods:
    """Training, the round schedule and estimator bytes of a node actor."""

    _name: str
    _state: str
    _estimator: Any
    _rounds: Rounds | None
    _round: int | None

    def _check(self) -> None:  # NodeWrapper's
        raise NotImplementedError

    async def status(self) -> dict[str, Any]:  # NodeWrapper's
        raise NotImplementedError

    # -- rounds ------------------------------------------------------------------------------
    async def configure_rounds(
        self, epochs_per_round: int = 1, deterministic: bool = False, open: bool = False
    ) -> None:
        """A fresh round schedule for the next :meth:`train` (see :class:`kestrel_core.Rounds`).

        Raises:
            ConfigError: ``epochs_per_round`` is not an integer ≥ 1.
        """
        self._rounds = Rounds(epochs_per_round, deterministic=deterministic, open=open)
        self._round = None

    async def round_ready(self, k: int) -> int:
        """Wait until round ``k`` may be drawn; returns the round the next ``sample_proposal``
        draws from (``k``, or a later one when not deterministic). At once without a schedule
        or after training ended."""
        if self._rounds is None:
            self._round = None
            return int(k)
        self._round = await self._rounds.wait_ready(int(k))
        return self._round

    async def round_appended(self, k: int, last: bool = False) -> None:
        """Round ``k``'s rows are in the store (``last``: no round follows)."""
        if self._rounds is not None:
            self._rounds.appended(int(k), bool(last))

    async def close_rounds(self, last: int | None = None) -> None:
        """No more rounds come after round ``last`` (budget spent; ``None``: stopping)."""
        if self._rounds is not None:
            self._rounds.close(last)

    # -- training ----------------------------------------------------------------------------
    async def train(self, store: Any) -> dict[str, Any]:
        """Train the estimator from the store until it stops; sampling calls interleave.

        Args:
            store: the store's :class:`~kestrel_ray.StoreHandle`; the estimator reads it
                through a :class:`~kestrel_ray.RayBufferView` (futures, no blocking get).

        Returns:
            The final :meth:`status`.

        Raises:
            EstimatorError: the node has no estimator. The estimator's own exceptions pass
                through with a note naming the node.
        """
        self._check()
        if self._estimator is None:
            raise EstimatorError(f"node {self._name!r} has no estimator to train")
        self._state = "training"
        view = RayBufferView(store, use_futures=True)
        rounds = self._rounds
        try:
            if rounds is not None and accepts_keyword(self._estimator.train, "rounds"):
                await self._estimator.train(view, rounds=rounds)
            else:  # an estimator without rounds: rounds are paced by the driver's clock alone
                if rounds is not None:
                    rounds.finish()
                await self._estimator.train(view)
        except Exception as err:
            self._state = "failed"
            if hasattr(err, "add_note"):
                err.add_note(f"(raised while training the estimator of node {self._name!r})")
            raise
        finally:
            if rounds is not None:
                rounds.finish()
        self._state = "done"
        return await self.status()

    async def request_stop(self) -> None:
        """Ask the estimator to stop training after its current step."""
        if self._estimator is not None:
            self._estimator.request_stop()

    async def save_bytes(self) -> bytes | None:
        """The estimator's state as bytes (``None`` without estimator), for the driver to write.

        No actor method takes a run-directory path: on a cluster the actor's machine has its
        own disk, and the run directory lives with the driver.
        """
        self._check()
        return None if self._estimator is None else self._estimator.save_bytes()

    async def save_state(self) -> tuple[bytes | None, int | None]:
        """:meth:`save_bytes` and the epoch count those weights reached (the estimator's status
        ``epoch``), read in the same turn of the event loop: no training step falls between.
        ``(None, None)`` without estimator."""
        self._check()
        if self._estimator is None:
            return None, None
        data = self._estimator.save_bytes()
        epoch = (self._estimator.status() or {}).get("epoch")
        return data, None if epoch is None else int(epoch)

    async def load_bytes(self, data: bytes, source: str = "checkpoint bytes") -> None:
        """Restore the estimator from :meth:`save_bytes`' output; a no-op without estimator.

        Args:
            data: the state. source: its name in error messages (the driver's file).
        """
        self._check()
        if self._estimator is not None:
            self._estimator.load_bytes(data, source=source)
