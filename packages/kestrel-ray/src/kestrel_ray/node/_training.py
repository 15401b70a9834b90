"""The training side of a node actor: train, stop, the round schedule, estimator bytes.

:class:`Training` is a component of :class:`~kestrel_ray.node._wrapper.NodeWrapper` (an async
Ray actor), which holds one and answers the driver's calls by delegating to it; it holds the
estimator-training state (the estimator, the round schedule and the round the next proposal
draws from) and never sees the actor. The driver configures the round schedule
(:class:`kestrel_core.Rounds`) before it starts training, then asks :meth:`Training.round_ready`
before each resimulation round (the answer names the round whose proposal the next
``sample_proposal`` call draws from) and reports each round's append with
:meth:`Training.round_appended`.

Every method runs on the actor's event loop (none blocks it): training steps and sampling
calls interleave there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kestrel_core import EstimatorError, Rounds
from kestrel_core.internal import accepts_keyword
from kestrel_ray.store._view import RayBufferView

if TYPE_CHECKING:
    from kestrel_ray.store._handle import StoreHandle

__all__ = ["Training"]


class Training:
    """Training, the round schedule and estimator bytes of one node's estimator.

    Args:
        name: the node's name (in error messages).
        estimator: the node's estimator, or ``None`` (a node without one: training raises,
            the rest are no-ops).

    Attributes:
        estimator: as given.
        rounds: the round schedule (``None``: none configured).
        round: the round the next ``sample_proposal`` draws from (``None``: the latest model).
    """

    def __init__(self, name: str, estimator: Any) -> None:
        self.name = name
        self.estimator = estimator
        self.rounds: Rounds | None = None
        self.round: int | None = None

    # -- rounds ------------------------------------------------------------------------------
    def configure_rounds(
        self, epochs_per_round: int = 1, deterministic: bool = False, open: bool = False
    ) -> None:
        """A fresh round schedule for the next :meth:`train` (see :class:`kestrel_core.Rounds`).

        Raises:
            ConfigError: ``epochs_per_round`` is not an integer ≥ 1.
        """
        self.rounds = Rounds(epochs_per_round, deterministic=deterministic, open=open)
        self.round = None

    async def round_ready(self, k: int, marked: bool = False) -> int:
        """Wait until round ``k`` may be drawn; returns the round the next ``sample_proposal``
        draws from (``k``, or a later one when not deterministic). At once without a schedule
        or after training ended.

        ``marked``: do not wait; ``k`` if training fixed round ``k``'s proposal at one of its
        epochs (:attr:`kestrel_core.Rounds.ready_round`), else 0 — asked once training ended,
        so that whether such a round is drawn does not depend on when the driver polled."""
        if marked:
            fixed = self.rounds is not None and self.rounds.ready_round >= int(k)
            return int(k) if fixed else 0
        if self.rounds is None:
            self.round = None
            return int(k)
        self.round = await self.rounds.wait_ready(int(k))
        return self.round

    def round_appended(self, k: int, last: bool = False) -> None:
        """Round ``k``'s rows are in the store (``last``: no round follows)."""
        if self.rounds is not None:
            self.rounds.appended(int(k), bool(last))

    def close_rounds(self, last: int | None = None) -> None:
        """No more rounds come after round ``last`` (budget spent; ``None``: stopping)."""
        if self.rounds is not None:
            self.rounds.close(last)

    # -- training ----------------------------------------------------------------------------
    def require_estimator(self) -> None:
        """Raise unless there is an estimator to train.

        Raises:
            EstimatorError: the node has no estimator.
        """
        if self.estimator is None:
            raise EstimatorError(f"node {self.name!r} has no estimator to train")

    async def train(self, store: StoreHandle) -> None:
        """Train the estimator from the store until it stops (sampling calls interleave on the
        event loop); the round schedule is finished however training ends.

        Args:
            store: the store's :class:`~kestrel_ray.StoreHandle`; the estimator reads it
                through a :class:`~kestrel_ray.RayBufferView` (futures, no blocking get).

        Raises:
            EstimatorError: the node has no estimator. The estimator's own exceptions pass
                through with a note naming the node.
        """
        self.require_estimator()
        view = RayBufferView(store, use_futures=True)
        rounds = self.rounds
        try:
            if rounds is not None and accepts_keyword(self.estimator.train, "rounds"):
                await self.estimator.train(view, rounds=rounds)
            else:  # an estimator without rounds: rounds are paced by the driver's clock alone
                if rounds is not None:
                    rounds.finish()
                await self.estimator.train(view)
        except Exception as err:
            if hasattr(err, "add_note"):
                err.add_note(f"(raised while training the estimator of node {self.name!r})")
            raise
        finally:
            if rounds is not None:
                rounds.finish()

    def request_stop(self) -> None:
        """Ask the estimator to stop training after its current step (no-op without one)."""
        if self.estimator is not None:
            self.estimator.request_stop()

    # -- estimator bytes ---------------------------------------------------------------------
    def save_bytes(self) -> bytes | None:
        """The estimator's state as bytes (``None`` without estimator)."""
        return None if self.estimator is None else self.estimator.save_bytes()

    def save_state(self) -> tuple[bytes | None, int | None]:
        """:meth:`save_bytes` and the epoch count those weights reached (the estimator's status
        ``epoch``), read together (no await between them). ``(None, None)`` without
        estimator."""
        if self.estimator is None:
            return None, None
        data = self.estimator.save_bytes()
        epoch = (self.estimator.status() or {}).get("epoch")
        return data, None if epoch is None else int(epoch)

    def load_bytes(self, data: bytes, source: str = "checkpoint bytes") -> None:
        """Restore the estimator from :meth:`save_bytes`' output; a no-op without estimator.

        Args:
            data: the state. source: its name in error messages (the driver's file).
        """
        if self.estimator is not None:
            self.estimator.load_bytes(data, source=source)
