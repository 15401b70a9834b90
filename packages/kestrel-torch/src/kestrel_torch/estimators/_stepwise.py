"""The estimator Kestrel's graph trains: options, a head, the training loop, sampling, checkpoints.

Shape symbols: n draws, N values, F all parameters of the latent node, D its free parameters.

:class:`StepwiseEstimator` implements kestrel-core's ``Estimator`` protocol by composing the
parts of this package, one module each: the frozen options (``_options``), node checks, device
and seeds (``_binding``), embedding + head (``_model``, with the head interface in ``_head``),
buffer rows and the NPE loss (``_rows``, ``_loss``), the epoch loop (``_fit``), sampling and
conditions (``_sampling``). It holds two parts it delegates to: the sampling and density
methods (an :class:`~kestrel_torch.estimators._inference.Inference`) and checkpoints as bytes or
files (a :class:`~kestrel_torch.checkpoint._persist.Checkpoints`, format in ``_state``). A
concrete estimator names its options class and builds its head; nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import torch

from kestrel_core import (
    TRAINABLE,
    BufferView,
    EstimatorContext,
    Record,
    Rounds,
    Status,
)
from kestrel_torch._errors import EstimatorError
from kestrel_torch.checkpoint._persist import Checkpoints
from kestrel_torch.data._batch import Batch
from kestrel_torch.data._loader import CachedDataLoader
from kestrel_torch.data._split import LIVE, SplitView
from kestrel_torch.estimators._binding import Binding
from kestrel_torch.estimators._ensemble import EnsemblePosterior, pack_members, unpack_members
from kestrel_torch.estimators._inference import Inference
from kestrel_torch.estimators._options import EstimatorOptions
from kestrel_torch.estimators._sampling import Conditions
from kestrel_torch.nets._embedding import check_embedding
from kestrel_torch.nets._head import PosteriorHead
from kestrel_torch.nets._model import build_model
from kestrel_torch.train._fit import FitState, fit, train_step
from kestrel_torch.train._pacing import DeferredDiscards, Pacing
from kestrel_torch.train._rng import CallRng

__all__ = ["StepwiseEstimator"]


class StepwiseEstimator:
    """Base of Kestrel's estimators: neural posterior estimation (NPE) trained step by step.

    A subclass sets :attr:`options_class` and implements :meth:`make_head`. The estimator works
    in the prior's standard-normal space ``z = prior.to_normal(θ)``; the loader maps ``θ`` into
    ``(z, log|det ∂z/∂θ|)`` once, in float64, in its background thread.

    Keyword args: the fields of :attr:`options_class` (see
    :class:`~kestrel_torch.estimators._options.EstimatorOptions`: ``max_epochs``, ``batch_size``, ``lr``,
    ``early_stop_patience``, ``lr_decay_factor``, ``lr_patience``, ``min_lr``, ``prior_epochs``,
    ``gamma``, ``cache_sync_every``, ``max_cache_samples``, ``discard_samples``,
    ``log_ratio_threshold``, ``embedding``, ``device``, ``seed``). Construction only validates
    them; the model is built on the first training data.

    Training (:meth:`train`): epochs of ``max(1, count // batch_size)`` steps with an
    ``await asyncio.sleep(0)`` after each, so an async actor serves sampling calls between
    steps; the validation loss is computed in eval mode over the whole validation set and
    changes no state. A deep copy of embedding and head (plain attributes included) — the best
    model — is taken whenever the validation loss improves; every sampling method uses it while
    training continues. Rows with a non-finite value are left out of every step and counted.

    Attributes:
        options: the validated options (frozen).

    Raises:
        TypeError: an unknown keyword argument (with a suggestion).
        ConfigError: a keyword argument out of range.
    """

    options_class: ClassVar[type[EstimatorOptions]] = EstimatorOptions

    def __init__(self, **kwargs: Any) -> None:
        self.options = self.options_class.from_kwargs(kwargs, type(self).__name__)
        self._binding: Binding | None = None
        self._fit = FitState()
        # two rows of each condition the model was built from (shapes and dtypes at inference)
        self._init: dict[str, torch.Tensor] = {}
        self._conditions: Conditions | None = None
        self._stop_requested = False
        self._state = "idle"
        #: the mixture this estimator samples after loading an ensemble checkpoint (else None)
        self._ensemble: EnsemblePosterior | None = None
        self._error: str | None = None
        # the parts the public sampling and checkpoint methods delegate to (bound methods, not
        # closures, so that a deep copy or a pickle of the estimator stays whole)
        self._inference = Inference(
            self.options, self._fit, self._bound, conditions=self._current_conditions
        )
        self._checkpoints = Checkpoints(
            type(self).__name__,
            self.options,
            self._fit,
            self._bound,
            init=self._init_rows,
            start=self._start,
        )

    def make_head(self, dim: int, context_dim: int) -> PosteriorHead:
        """The head for ``dim`` (D) free parameters and an embedding of width ``context_dim`` (E)."""
        raise NotImplementedError

    @property
    def config(self) -> Mapping[str, Any]:
        """The options as a read-only mapping (keyword → value)."""
        return MappingProxyType(self.options.as_dict())

    def check_conditions(
        self,
        evidence: Sequence[str],
        scaffolds: Sequence[str] = (),
        *,
        path: str = "estimator",
        imports: Iterable[str] = (),
        rows: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """The checks :meth:`setup` would make of the ``embedding`` option in the node's actor,
        made where the config is loaded (a launch's preflight, before Ray starts): see
        :func:`~kestrel_torch.nets._embedding.check_embedding` (arguments and errors)."""
        check_embedding(self.options.embedding, evidence, scaffolds, path, imports, rows)

    # -- setup -------------------------------------------------------------------------------
    def setup(self, context: EstimatorContext) -> None:
        """Bind the estimator to its node.

        Raises:
            EstimatorError: the prior lacks the standard-normal bijection, or the node has no
                evidence to condition on.
            ConfigError: an unknown device.
        """
        self._binding = Binding.create(context, self.options, type(self).__name__)

    def _bound(self) -> Binding:
        if self._binding is None:
            raise EstimatorError(f"{type(self).__name__}: call setup(context) first")
        return self._binding

    def _current_conditions(self) -> Conditions | None:
        return self._conditions

    def _init_rows(self) -> Mapping[str, torch.Tensor]:
        return self._init

    @property
    def split_seed(self) -> int:
        """The seed of the train/validation split of ``validation_fraction``: the ``seed``
        option, else the run's (the context's) seed, else 0 — stable across a resumed run."""
        if self.options.seed is not None:
            return int(self.options.seed)
        seed = self._bound().context.seed
        return int(seed) % 2**63 if seed is not None else 0

    @property
    def total_epochs(self) -> int:
        """Epochs trained over the estimator's life (continues after :meth:`load`)."""
        return self._fit.epochs

    def _start(self, init: Mapping[str, torch.Tensor]) -> None:
        """Build a fresh model from rows of the conditions and train it from now on."""
        b = self._bound()
        self._init = {c: t.detach()[:2].clone() for c, t in init.items()}
        model = build_model(
            self.options.embedding, b.context, self.make_head, self._init, b.device, b.model_seed
        )
        self._fit.start(model, model.param_groups(), self.options)
        self._conditions = Conditions(b.context, b.device, self._init)

    def _start_from(self, batch: Batch) -> bool:
        """:meth:`_start` from the first finite rows of ``batch``; ``False`` if it has none."""
        finite, inputs = self._bound().columns.split(batch)
        index = torch.nonzero(finite).squeeze(1)[:2]
        if index.numel() == 0:
            return False
        self._start({c: t[index] for c, t in inputs.items()})
        return True

    def _start_from_cache(self, loader: CachedDataLoader) -> None:
        """:meth:`_start` from the first finite rows the training cache holds.

        Raises:
            EstimatorError: every cached row has a non-finite value.
        """
        if not self._start_from(loader.all()):
            raise EstimatorError(
                f"node {self._bound().context.node!r}: no usable training row in "
                f"epoch {self._fit.epochs + 1} (all {loader.count} training rows "
                "have a non-finite value)"
            )

    # -- training ----------------------------------------------------------------------------
    def _loader(
        self,
        view: BufferView,
        statuses: Any,
        name: str,
        *,
        prefetch: bool = True,
        training: bool | None = None,
    ) -> CachedDataLoader:
        """A loader of this node's columns (θ mapped to z), named ``<node>-<name>``;
        ``prefetch`` as :class:`~kestrel_torch.CachedDataLoader`'s; ``training`` (default:
        ``statuses`` is TRAINABLE) caps it at ``max_cache_samples``."""
        b = self._bound()
        training = statuses == TRAINABLE if training is None else training
        columns = b.columns
        return CachedDataLoader(
            view,
            columns.keys(),
            statuses,
            b.device,
            transforms={columns.theta: columns.to_latent},
            dtypes={columns.theta: torch.float64, columns.log_prob: torch.float64},
            max_samples=self.options.max_cache_samples if training else 0,
            name=f"{b.context.node}-{name}",
            prefetch=prefetch,
        )

    def _train_step(self, batch: Batch) -> torch.Tensor | None:
        """One optimiser step on ``batch`` (the model is built from it if there is none yet);
        the detached loss, or ``None`` if no step was taken."""
        loss = self._bound().loss
        if self._fit.model is None and not self._start_from(batch):
            loss.nonfinite_rows += len(batch)
            return None
        return train_step(self._fit, loss, batch, self.options.clip_max_norm)

    async def train(self, view: BufferView, rounds: Rounds | None = None) -> None:
        """Train on the view's TRAINING/DISFAVOURED samples, validate on its VALIDATION samples.

        Runs until ``total_epochs`` reaches ``max_epochs``, fewer on early stopping or
        :meth:`request_stop` (which ends training after the current step). Blocking work (the
        first cache fill) runs in a worker thread, so the event loop stays free.

        When new rows enter training: a direct call (``rounds=None``) syncs its caches at fixed
        points, every ``cache_sync_every`` epochs, and each sync takes the store exactly as it
        is at that point (the loaders do not prefetch: the sync fetches and waits, holding the
        event loop for that fetch; an unchanged store makes it a cheap checkout). So a seeded
        direct call trains to the same weights whatever the machine's speed and load, also when
        the caller changes the store between epochs (from a coroutine on the same event loop;
        changes made while the first fill runs, or from another thread, land where they land).
        The launch always passes its schedule, and its loaders keep fetching in the background:
        a sync never waits and new rows enter when the fetch has them, unless the schedule is
        deterministic (then they enter at the rounds, below). A direct caller who wants that
        live behaviour passes ``Rounds(0)`` (no rounds, only the background fetch).

        Args:
            view: the store view.
            rounds: the launch's round schedule (:class:`kestrel_core.Rounds`): round ``k``'s
                proposal (:meth:`sample_proposal` with ``round=k``) is the best model at epoch
                ``k·E`` of this call; deterministic schedules also fix when new rows enter
                training (and hold the discards until then); an open schedule holds back early
                stopping. ``None``: caches sync every ``cache_sync_every`` epochs, at fixed
                points (above).

        Raises:
            EstimatorError: no training samples, no usable (finite) training row, an epoch in
                which every drawn row was non-finite, or a failure of the loader (re-raised
                from its thread).
        """
        b = self._bound()
        node = b.context.node
        if self._state == "training":
            raise EstimatorError(f"node {node!r}: train() is already running")
        self._state, self._error = "training", None
        discards = DeferredDiscards(view) if rounds is not None and rounds.deterministic else None
        # a direct call syncs at fixed points without a background fetch between them; the
        # launch (always with a schedule) keeps the non-blocking loader
        prefetch = rounds is not None
        fraction = self.options.validation_fraction
        seed = self.split_seed
        train_view: BufferView = discards or view
        train_statuses: Any = TRAINABLE
        if fraction > 0:  # both sides of the id split, read from every live row
            train_view = SplitView(train_view, fraction, seed, validation=False)
            train_statuses = LIVE
        train_loader = self._loader(
            train_view, train_statuses, "train", prefetch=prefetch, training=True
        )
        val_loader: CachedDataLoader | None = None
        self._inference.proposals.clear()
        try:
            with self._fit.timings.timed("cache_fill"):
                await asyncio.to_thread(train_loader.sync)
                self._fit.note_ids(train_loader)
                if fraction > 0:
                    val_loader = self._loader(
                        SplitView(view, fraction, seed, validation=True),
                        LIVE,
                        "validation",
                        prefetch=prefetch,
                        training=False,
                    )
                    try:
                        await asyncio.to_thread(val_loader.sync)
                    except EstimatorError:  # no row of the store validates (yet)
                        val_loader.close()
                        val_loader = None
                elif int(view.stats().get("validation", 0)) > 0:
                    val_loader = self._loader(
                        view, (Status.VALIDATION,), "validation", prefetch=prefetch
                    )
                    await asyncio.to_thread(val_loader.sync)
            if self._fit.model is None and self.options.max_epochs > 0:
                self._start_from_cache(train_loader)
            stop = lambda: self._stop_requested  # noqa: E731
            loaders = [train_loader] + ([val_loader] if val_loader is not None else [])
            pacing = Pacing(rounds, self._inference.fix_proposal, loaders, discards, stop)
            await fit(
                self._fit,
                b.loss,
                train_loader,
                val_loader,
                self.options,
                b.batch_generator,
                stop=stop,
                name=node,
                pacing=pacing,
            )
            self._state = "stopped" if self._stop_requested else "done"
        except BaseException as err:
            self._state, self._error = "stopped", f"{type(err).__name__}: {err}"
            raise
        finally:
            self._stop_requested = False
            if rounds is not None:
                rounds.finish()
            train_loader.close()
            if val_loader is not None:
                val_loader.close()

    # -- control and status ------------------------------------------------------------------
    def request_stop(self) -> None:
        """End a running :meth:`train` after its current step (a later call is also stopped)."""
        self._stop_requested = True

    def status(self) -> dict[str, Any]:
        """Progress, readable at any time.

        Returns:
            ``state`` ("idle", "training", "done", "stopped"), ``epoch`` (= ``total_epochs``),
            ``max_epochs`` (a total), ``train_loss``, ``val_loss``, ``best_val_loss``, ``best_epoch``,
            ``ended`` (see :class:`FitState`), ``samples_seen`` (distinct ids the training cache
            has held), ``lr``, the counters ``nonfinite_rows``, ``skipped_steps``, ``discarded``,
            ``clipped_directions``, ``error`` (the exception that ended training, else None),
            ``observation_checks`` (what the latest draw's observation guards found),
            ``truncation`` (after a truncated proposal draw: its threshold, candidates,
            acceptance and resampled draws),
            ``timings`` (where training time went, :mod:`kestrel_torch.train._timings`); the training
            part comes from :meth:`~kestrel_torch.train._fit.FitState.report`.
        """
        loss = self._binding.loss if self._binding is not None else None
        return {
            "state": self._state,
            **self._fit.report(self.options.lr),
            "max_epochs": self.options.max_epochs,
            "nonfinite_rows": loss.nonfinite_rows if loss is not None else 0,
            "skipped_steps": loss.skipped_steps if loss is not None else 0,
            "discarded": loss.discarded if loss is not None else 0,
            "clipped_directions": self._inference.clipped,
            "error": self._error,
            "observation_checks": list(self._conditions.findings) if self._conditions else [],
            **self._ensemble_status(),
            **self._truncation_status(),
        }

    def _truncation_status(self) -> dict[str, Any]:
        """``{"truncation": {...}}`` after a truncated proposal draw: the threshold τ, the prior
        candidates tried, the share inside the region and the draws resampled instead."""
        stats = self._inference.truncation
        if stats is None:
            return {}
        return {
            "truncation": {
                "threshold": stats.threshold,
                "candidates": stats.candidates,
                "acceptance": stats.acceptance,
                "resampled": stats.resampled,
            }
        }

    def _ensemble_status(self) -> dict[str, Any]:
        """``{"ensemble": {"members": K, "weights": [...]}}`` after loading an ensemble."""
        if self._ensemble is None:
            return {}
        weights = [float(w) for w in self._ensemble.weights]
        return {"ensemble": {"members": len(self._ensemble), "weights": weights}}

    # -- sampling and densities (the Inference part) -----------------------------------------
    @property
    def prior(self) -> Any:
        """The latent node's prior (a :class:`kestrel_core.Product`)."""
        return self._inference.prior

    def sample_prior(self, n: int, rng: CallRng = None) -> Record:
        """``n`` prior draws from ``rng`` (else the sampling stream): float64 value, log_prob.

        Raises:
            TypeError, ValueError: ``n`` is not a non-negative integer.
        """
        return self._inference.sample_prior(n, rng)

    def _sampler(self) -> Any:
        """What the sampling and density methods use: the loaded ensemble, else the model."""
        return self._inference if self._ensemble is None else self._ensemble

    def sample_posterior(
        self, n: int, conditions: Mapping[str, Any], rng: CallRng = None
    ) -> Record:
        """``n`` draws from the posterior given ``conditions``.

        Args:
            n: number of draws.
            conditions: evidence node → array ``(n, *D)`` or ``(1, *D)`` (broadcast); other
                nodes are ignored, scaffolds are never used at inference.
            rng: the call's generator (else the sampling stream); never from option ``seed``.

        Returns:
            ``{"value": float64 (n, F), "log_prob": float64 (n,)}``; ``log_prob`` is the
            θ-space log density of the distribution the value was drawn from.

        Raises:
            EstimatorError: no trained model yet, or a missing/mis-shaped condition.
        """
        return self._sampler().sample_posterior(n, conditions, rng)

    def sample_proposal(
        self, n: int, conditions: Mapping[str, Any], rng: CallRng = None, round: int | None = None
    ) -> Record:
        """``n`` draws from the γ-tempered posterior ∝ prior · likelihood^γ (prior draws early on).

        Prior draws are returned before the first epoch, while ``total_epochs < prior_epochs``
        and for ``gamma = 0``. Args, returns and raises as :meth:`sample_posterior`, plus:

        Args:
            round: the resimulation round (:meth:`train`'s ``rounds``): draw from the model
                fixed for it; ``None``, or a round not fixed (training ended before it): the
                current best model.
        """
        return self._sampler().sample_proposal(n, conditions, rng, round)

    def log_prob(self, theta: Any, conditions: Mapping[str, Any]) -> np.ndarray:
        """Log density of the posterior at ``theta`` given ``conditions``.

        Uses the best model, like the sampling methods; deterministic.

        Args:
            theta: array ``(N, F)``.
            conditions: evidence node → array ``(N, *D)`` or ``(1, *D)``.

        Returns:
            float64 ``(N,)``, θ-space; ``-inf`` in each row where the prior's density is zero
            (outside its support, NaN, ±inf), as the posterior's is — never an error for such
            a row; the other rows are unchanged by it.

        Raises:
            EstimatorError: no trained model, ``theta`` not 2-D, or a missing/mis-shaped
                condition.
            ShapeError: ``theta`` has another number of columns than the prior's ``F``.
        """
        return self._sampler().log_prob(theta, conditions)

    # -- checkpoints (the Checkpoints part) --------------------------------------------------
    def save_bytes(self) -> bytes:
        """The checkpoint as bytes: current and best models, optimiser, schedule, epoch counter.

        Tensors and plain containers only, for ``torch.load(weights_only=True)`` (:meth:`load_bytes`).

        After loading an ensemble checkpoint: the ensemble (every member's checkpoint).

        Raises:
            EstimatorError: :meth:`setup` was not called.
        """
        own = self._checkpoints.save_bytes()
        if self._ensemble is None:
            return own
        return pack_members([own] + [m.save_bytes() for m in self._ensemble.members[1:]])

    @staticmethod
    def pack_members(blobs: Sequence[bytes]) -> bytes:
        """An ensemble checkpoint of members' :meth:`save_bytes` outputs (member ``k`` at
        index ``k``); :meth:`load_bytes` of it makes this estimator sample their mixture."""
        return pack_members(blobs)

    @staticmethod
    def unpack_members(data: bytes, *, source: str = "checkpoint bytes") -> list[bytes] | None:
        """The members' bytes of an ensemble checkpoint; ``None`` for one estimator's.

        Raises:
            CheckpointError: an ensemble checkpoint that cannot be read.
        """
        return unpack_members(data, source=source)

    def load_bytes(self, data: bytes, *, source: str = "checkpoint bytes") -> None:
        """Restore what :meth:`save_bytes` returned, onto this estimator's device.

        Training resumes from the loaded weights, optimiser and best model; ``total_epochs`` continues.

        Args:
            data: the checkpoint. source: its name in messages.

        Raises:
            CheckpointError: (an :class:`~kestrel_core.EstimatorError`) not a checkpoint, or
                one of another estimator class or parameter dimension.

        An ensemble checkpoint (:meth:`pack_members`, written by a launch with ``ensemble``
        K > 1) loads member 0 here and members 1…K−1 into copies of this estimator (same
        options and node); sampling and ``log_prob`` then use their mixture
        (:class:`~kestrel_torch.EnsemblePosterior`, weights from the members' validation
        losses) and :meth:`save_bytes` writes the ensemble back.
        """
        blobs = unpack_members(data, source=source)
        if blobs is None:
            self._ensemble = None
            self._checkpoints.load_bytes(data, source=source)
            return
        self._checkpoints.load_bytes(blobs[0], source=f"{source} (member 0)")
        members: list[Any] = [self._inference]
        scores = [self._fit.best_loss]
        for k, blob in enumerate(blobs[1:], 1):
            member = type(self)(**self.options.as_dict())
            member.setup(self._bound().context)
            member.load_bytes(blob, source=f"{source} (member {k})")
            members.append(member)
            scores.append(member._fit.best_loss)
        self._ensemble = EnsemblePosterior(
            members, [None if s is None else -float(s) for s in scores]
        )

    def save(self, directory: str) -> None:
        """Write :meth:`save_bytes` to ``<directory>/estimator.pt`` (atomically).

        Raises:
            CheckpointError: (an :class:`~kestrel_core.EstimatorError`) the file cannot be written.
        """
        self._checkpoints.save(directory)

    def load(self, directory: str) -> None:
        """Restore ``<directory>/estimator.pt`` (see :meth:`load_bytes`).

        Raises:
            CheckpointError: no checkpoint, or one of another class or parameter dimension.
        """
        self._checkpoints.load(directory)
