"""The training loop: epochs of steps over (model, loss, loaders), early stopping, learning-rate
schedule and the best model.

:func:`fit` trains ``state.model`` on batches of the training loader, validates on the whole
validation set after each epoch, and keeps a deep copy of the model whenever the validation
loss improves — the **best model**, which every sampling method uses while training goes on.
It is written for an estimator that serves sampling calls from the same event loop: after
every step, and after each phase of an epoch's end, it yields with ``await asyncio.sleep(0)``.

``max_epochs`` counts every epoch of the estimator's life: a model loaded from a checkpoint
trains only up to that total (a resumed run raises it for more). A loaded best model stays the
best until an epoch beats it (on the validation set, re-evaluated; without one, on its
recorded loss), so a resumed run never replaces it with a worse one. Under a round schedule that
was open when training started (a simulation budget with rounds to come, without
``budget.stop_early``) neither ``max_epochs`` nor early stopping ends training while rounds still
come: it goes on past ``max_epochs`` (one INFO line says so), and once the rounds stopped it takes
the store's rows in once and trains one more epoch if rows came that no epoch trained on
(:meth:`~kestrel_torch.train._pacing.Pacing.take_in`), so every budgeted simulation reaches
training. ``max_epochs`` 0 still trains nothing.

Early stopping: training ends after ``early_stop_patience`` epochs without a better loss.
Because the validation set changes with the rounds — the store's newest rows, or, with the
estimator's ``validation_fraction``, a fixed slice of every round whose union grows
(:mod:`~kestrel_torch.data._split`) — losses of different epochs are on different data; each
epoch therefore compares the current model with the best model's loss on the same,
current validation set (re-evaluated only when the set's ids changed since it was last taken),
both scored against the same target
(:meth:`~kestrel_torch.nets._head.PosteriorHead.validation_loss`: a Gaussian head's training loss
depends on its own reference of the buffer; on validation rows every head is scored on the
rows' own Gaussian instead). Without a validation set the training loss is the measure. Learning
rate: ``ReduceLROnPlateau`` on the same measure when ``lr_decay_factor < 1``, never below
``min_lr``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from kestrel_torch._errors import EstimatorError
from kestrel_torch.data._batch import Batch
from kestrel_torch.data._loader import CachedDataLoader
from kestrel_torch.estimators._options import EstimatorOptions
from kestrel_torch.train._pacing import Pacing
from kestrel_torch.train._timings import Timings

__all__ = ["FitState", "Loss", "fit", "train_step"]

log = logging.getLogger("kestrel_torch")


class Loss(Protocol):
    """What :func:`fit` minimises (:class:`~kestrel_torch.estimators._loss.EstimatorLoss`)."""

    nonfinite_rows: int
    skipped_steps: int

    def __call__(self, model: Any, batch: Batch) -> torch.Tensor | None:
        """Scalar training loss with gradient, or ``None``: no step on this batch."""
        ...

    def evaluate(self, model: Any, loader: CachedDataLoader) -> float | None:
        """The loss over the loader's whole set, changing no state."""
        ...

    def refit(self, model: Any, loader: CachedDataLoader) -> None:
        """End-of-epoch refit from the training loader."""
        ...


@dataclass
class FitState:
    """Everything training changes, kept from one :func:`fit` call to the next and saved in
    checkpoints.

    The optimiser is built on first use (:attr:`optimizer`): constructing a torch optimiser
    imports ``torch._dynamo`` (seconds of CPU), which a process that only loads weights to
    sample — ``kestrel sample`` — never needs. A checkpoint's optimiser and schedule states wait
    in the state until then, and are saved again unchanged if no step was taken.

    Attributes:
        model: the model being trained (``None`` until built), in training mode.
        best: the best model: an eval-mode deep copy of ``model`` (plain attributes included),
            or ``None`` before the first epoch.
        best_loss: its loss when it was taken. best_epoch: the epoch count when it was taken
            (``None`` before the first). epochs: epochs trained over the estimator's life.
        train_loss, val_loss: of the last epoch.
        seen: how many distinct samples the training cache has held (ids are assigned in
            increasing order and never reused, so a count and the largest id counted,
            ``seen_max``, suffice; ids below it that arrive later — a capped cache's random
            subset — are not counted again).
        ended: why the last :func:`fit` call ended — ``"max_epochs"``, ``"early_stop"`` (no
            better loss for ``early_stop_patience`` epochs) or ``"stopped"`` (asked to).
        timings: where training time went (:class:`~kestrel_torch.train._timings.Timings`; not
            saved in checkpoints).
    """

    model: nn.Module | None = None
    best: nn.Module | None = None
    best_loss: float | None = None
    best_epoch: int | None = None
    epochs: int = 0
    train_loss: float | None = None
    val_loss: float | None = None
    seen: int = 0
    seen_max: int = -1
    ended: str | None = None
    timings: Timings = field(default_factory=Timings, repr=False)
    _groups: list[dict[str, Any]] | None = field(default=None, repr=False)
    _options: EstimatorOptions | None = field(default=None, repr=False)
    _optimizer: torch.optim.Optimizer | None = field(default=None, repr=False)
    _scheduler: Any = field(default=None, repr=False)
    _pending: dict[str, Any] = field(default_factory=dict, repr=False)

    def start(
        self, model: nn.Module, groups: list[dict[str, Any]], options: EstimatorOptions
    ) -> None:
        """Train ``model`` from now on: a fresh optimiser and schedule (built on first use);
        the best model is dropped."""
        self.model, self.best = model, None
        self._groups, self._options = groups, options
        self._optimizer = self._scheduler = None
        self._pending = {}

    def reset(self) -> None:
        """Drop the model, the best model, the optimiser and the schedule."""
        self.model = self.best = None
        self._groups = self._options = self._optimizer = self._scheduler = None
        self._pending = {}

    def restore_optimizer(
        self, optimizer: Any, scheduler: Any = None, lr: float | None = None
    ) -> None:
        """Saved optimiser and schedule states (``state_dict()`` s or ``None``) for the
        optimiser of the started model, applied when it is built; ``lr`` (when not ``None``)
        then replaces the saved learning rate."""
        self._pending = {"optimizer": optimizer, "scheduler": scheduler, "lr": lr}

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """AdamW over the started model's parameter groups (built now if not yet).

        Raises:
            RuntimeError: no model was started.
        """
        if self._optimizer is None:
            if self._groups is None or self._options is None:
                raise RuntimeError("FitState.optimizer: no model was started")
            options = self._options
            self._optimizer = torch.optim.AdamW(self._groups, lr=options.lr, weight_decay=0.0)
            if options.lr_decay_factor < 1.0:
                self._scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                    self._optimizer,
                    factor=options.lr_decay_factor,
                    patience=options.lr_patience,
                    min_lr=options.min_lr,
                )
            pending, self._pending = self._pending, {}
            if pending.get("optimizer") is not None:
                self._optimizer.load_state_dict(pending["optimizer"])
                if pending.get("lr") is not None:
                    for group in self._optimizer.param_groups:
                        group["lr"] = float(pending["lr"])
            if self._scheduler is not None and pending.get("scheduler") is not None:
                self._scheduler.load_state_dict(pending["scheduler"])
        return self._optimizer

    @property
    def scheduler(self) -> Any:
        """ReduceLROnPlateau over :attr:`optimizer`, or ``None`` (``lr_decay_factor`` 1)."""
        _ = self.optimizer
        return self._scheduler

    def optimizer_states(self) -> tuple[Any, Any]:
        """``(optimizer, scheduler)`` states to save: of the built optimiser, else the pending
        ones (``None`` where there are none)."""
        if self._optimizer is not None:
            sched = self._scheduler.state_dict() if self._scheduler is not None else None
            return self._optimizer.state_dict(), sched
        optimizer, scheduler = self._pending.get("optimizer"), self._pending.get("scheduler")
        if optimizer is not None and self._pending.get("lr") is not None:
            optimizer = copy.deepcopy(optimizer)
            for group in optimizer.get("param_groups", []):
                group["lr"] = float(self._pending["lr"])
        return optimizer, scheduler

    def keep_best(self) -> None:
        """Make the current model the best model (deep copy in eval mode)."""
        best = copy.deepcopy(self.model)
        assert best is not None  # internal: fit() has a model
        best.eval()
        self.best = best
        self.best_epoch = self.epochs

    def note_ids(self, loader: CachedDataLoader) -> None:
        """Count the ids the training cache holds now above :attr:`seen_max` into :attr:`seen`."""
        ids = loader.ids
        if ids.size:
            new = int(np.count_nonzero(ids > self.seen_max))
            self.seen += new
            self.seen_max = max(self.seen_max, int(ids.max()))

    @property
    def lr(self) -> float | None:
        """The current learning rate (without building the optimiser); ``None`` before a model
        was started."""
        if self._optimizer is not None:
            return float(self._optimizer.param_groups[0]["lr"])
        optimizer, _ = self.optimizer_states()
        if optimizer is not None and optimizer.get("param_groups"):
            return float(optimizer["param_groups"][0]["lr"])
        return float(self._options.lr) if self._options is not None else None

    def report(self, lr: float) -> dict[str, Any]:
        """The training part of an estimator's status: ``epoch`` and ``total_epochs`` (both the
        epochs trained), ``train_loss``, ``val_loss``, ``best_val_loss``, ``best_epoch``,
        ``ended``, ``samples_seen``, ``lr`` (``lr``: the configured one, before a model
        started) and ``timings`` (``{part: {"seconds", "count"}}``)."""
        return {
            "epoch": self.epochs,
            "total_epochs": self.epochs,
            "train_loss": self.train_loss,
            "val_loss": self.val_loss,
            "best_val_loss": self.best_loss,
            "best_epoch": self.best_epoch,
            "ended": self.ended,
            "samples_seen": int(self.seen),
            "lr": self.lr if self.lr is not None else lr,
            "timings": self.timings.as_dict(),
        }


def train_step(
    state: FitState, loss: Loss, batch: Batch, clip_max_norm: float = 0.0
) -> torch.Tensor | None:
    """One optimiser step on ``batch``, the gradients' total 2-norm clipped to
    ``clip_max_norm`` first (0: not clipped); returns the detached loss, or ``None`` if none was
    taken."""
    model, optimizer = state.model, state.optimizer
    assert model is not None  # internal: started
    model.train()
    value = loss(model, batch)
    if value is None:
        return None
    optimizer.zero_grad(set_to_none=True)
    value.backward()
    if clip_max_norm > 0:
        nn.utils.clip_grad_norm_(model.parameters(), clip_max_norm)
    optimizer.step()
    return value.detach()


async def fit(
    state: FitState,
    loss: Loss,
    train: CachedDataLoader,
    val: CachedDataLoader | None,
    options: EstimatorOptions,
    generator: torch.Generator,
    *,
    stop: Callable[[], bool],
    name: str,
    pacing: Pacing | None = None,
) -> None:
    """Train ``state.model`` until ``state.epochs`` reaches ``options.max_epochs`` (a total) —
    or, under an open round schedule, until the rounds stopped coming and their rows were in an
    epoch (see the module).

    Each epoch: a cache sync every ``cache_sync_every`` epochs (not before the first; it
    waits for a fetch only where the loader does not prefetch — a direct ``train(view)`` call,
    whose syncs thus take the store as it is at that epoch), then
    ``max(1, count // batch_size)`` steps on batches drawn with ``generator`` (each followed by
    a turn of the event loop), the loss's end-of-epoch refit, the validation loss, the best
    model, the schedule. ``stop()`` is asked after every step and every epoch.

    Args:
        state: with a started model (:meth:`FitState.start`); updated in place.
        loss: the loss. train: the training loader, synced. val: the validation loader, synced,
            or ``None``. options: the estimator's options. generator: for the batches.
        stop: ``True`` ends training after the current step. name: the node, for messages.
        pacing: the round schedule (:class:`~kestrel_torch.train._pacing.Pacing`): asked at the end
            of every epoch (fixes a due round's proposal; deterministic: syncs the caches there
            instead of every ``cache_sync_every`` epochs), and early stopping waits while it
            holds (a budget with rounds left; patience restarts when it lets go); an open
            schedule also holds ``max_epochs`` back (:attr:`Pacing.budgeted`).

    Raises:
        EstimatorError: an epoch without a single usable step (names the node and counts the
            non-finite rows and skipped steps).
    """
    best_metric, bad_epochs = _recorded(state), 0
    best_scored: np.ndarray | None = None  # the validation ids best_metric was taken on
    pacing = pacing if pacing is not None else Pacing(None, lambda k: None, (), None, stop)
    held = pacing.hold_early_stop
    epoch = -1
    state.ended = "max_epochs"
    timed, clock = state.timings.timed, time.perf_counter
    # a budget's rows all reach training (issue 31 item 4): neither max_epochs nor early
    # stopping ends training while the budget's rounds still come; once they stopped coming,
    # the store's rows are taken in once and, if rows came that no epoch trained on, one more
    # epoch trains on them (max_epochs 0: no training at all, budget or not)
    budgeted = pacing.budgeted and options.max_epochs > 0
    ending: str | None = None  # why training is to end: "max_epochs" or "early_stop"
    untrained = taken_in = extended = False
    while True:
        if ending is None and state.epochs >= options.max_epochs:
            ending = "max_epochs"
        if ending is not None:
            state.ended = ending
            if not budgeted or stop():
                break
            if pacing.hold_early_stop:  # rounds still come (max_epochs: early stopping waits)
                if not extended:
                    extended = True
                    log.info(
                        "node %s: max_epochs %d reached with the budget's rounds still to "
                        "come: training goes on until every budgeted row has been trained on "
                        "(budget.stop_early: true ends it here)",
                        name,
                        options.max_epochs,
                    )
            else:
                if not taken_in:
                    taken_in = True
                    with timed("cache_sync"):
                        if await pacing.take_in():
                            state.note_ids(train)
                            untrained = True
                if not untrained:
                    break
        epoch += 1  # of this call
        if pacing.periodic_sync and epoch > 0 and epoch % options.cache_sync_every == 0:
            with timed("cache_sync"):
                if train.sync():
                    state.note_ids(train)
                if val is not None:
                    val.sync()
        losses: list[torch.Tensor] = []
        for _ in range(max(1, train.count // options.batch_size)):
            t0 = clock()
            batch = train.sample_batch(options.batch_size, generator)
            t1 = clock()
            value = train_step(state, loss, batch, options.clip_max_norm)
            state.timings.add("batches", t1 - t0)
            state.timings.add("steps", clock() - t1)
            if value is not None:
                losses.append(value)
            await asyncio.sleep(0)
            if stop():
                break
        if not losses:
            if stop():
                state.ended = "stopped"
                break
            raise EstimatorError(
                f"node {name!r}: no usable training row in epoch {state.epochs + 1} "
                f"({loss.nonfinite_rows} rows with a non-finite value so far, "
                f"{loss.skipped_steps} steps with a non-finite loss)"
            )
        with timed("refit"):
            loss.refit(state.model, train)
        # each phase of the epoch's end is followed by a turn of the event loop
        await asyncio.sleep(0)
        state.train_loss = float(torch.stack(losses).mean())
        with timed("validation"):
            state.val_loss = loss.evaluate(state.model, val) if val is not None else None
        await asyncio.sleep(0)
        metric = state.val_loss if state.val_loss is not None else state.train_loss
        val_ids = val.ids if val is not None and state.val_loss is not None else None
        if val is not None and val_ids is not None and state.best is not None:
            # on the same, current validation set; the best model's loss on an unchanged set is
            # the one already known (eval mode and fixed atoms make it exact)
            if best_scored is None or not np.array_equal(val_ids, best_scored):
                with timed("validation"):
                    best_now = loss.evaluate(state.best, val)
                best_scored = val_ids
                if best_now is not None and math.isfinite(best_now):
                    best_metric = best_now
        state.epochs += 1
        if math.isfinite(metric) and metric < best_metric:
            best_metric, bad_epochs = metric, 0
            state.best_loss = metric
            state.keep_best()
            best_scored = val_ids
        else:
            bad_epochs += 1
        if state.scheduler is not None and math.isfinite(metric):
            state.scheduler.step(metric)
        log.info(
            "node %s: epoch %d train %.6g val %s lr %.3g",
            name,
            state.epochs,
            state.train_loss,
            state.val_loss,
            state.lr,
        )
        t0 = clock()
        untrained = False
        if await pacing.epoch_end(epoch + 1):
            state.note_ids(train)
            untrained = True  # rows no epoch trained on yet
        state.timings.add("epoch_end", clock() - t0)
        if held and not pacing.hold_early_stop:  # the last round came: a full patience for it
            bad_epochs = 0
        held = pacing.hold_early_stop
        if stop():
            state.ended = "stopped"
            break
        if ending is None and bad_epochs >= options.early_stop_patience and not held:
            ending = "early_stop"
        await asyncio.sleep(0)


def _recorded(state: FitState) -> float:
    """The loss a new model must beat before the first epoch: the best model's recorded loss
    (a loaded checkpoint's; re-evaluated each epoch where there is a validation set), else inf."""
    if state.best is None or state.best_loss is None or not math.isfinite(state.best_loss):
        return math.inf
    return float(state.best_loss)
