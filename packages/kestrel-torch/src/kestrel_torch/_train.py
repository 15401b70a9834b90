"""The shared training loop of Kestrel's estimators (:class:`StepwiseEstimator`).

Shape symbols: N samples, M rows of conditions (1 for a broadcast observation, else N), B batch
size, E embedding width, D free parameters of the latent node, F all its parameters.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import logging
import math
import numbers
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from kestrel_core import (
    TRAINABLE,
    BufferView,
    ConfigError,
    EstimatorContext,
    EstimatorError,
    Record,
    Status,
    check_count,
    flat_key,
)
from torch import nn

from ._checkpoint import load_module_state, module_state, read_checkpoint, write_checkpoint
from ._correction import truncated_weights
from ._embedding import build_embedding
from ._loader import CachedDataLoader

__all__ = ["StepwiseEstimator", "COMMON_DEFAULTS", "CHECKPOINT_FILE"]

log = logging.getLogger("kestrel_torch")

#: keyword arguments every estimator takes, with their defaults
COMMON_DEFAULTS: dict[str, Any] = {
    "max_epochs": 100,
    "batch_size": 128,
    "lr": 1e-3,
    "early_stop_patience": 16,
    "lr_decay_factor": 1.0,
    "lr_patience": 8,
    "min_lr": 0.0,
    "prior_epochs": 0,
    "gamma": 0.5,
    "cache_sync_every": 1,
    "max_cache_samples": 0,
    "discard_samples": False,
    "log_ratio_threshold": -20.0,
    "embedding": None,
    "device": "cpu",
    "seed": None,
}
#: file name of the checkpoint inside the directory given to ``save``/``load``
CHECKPOINT_FILE = "estimator.pt"
_FORMAT = 1
_CHUNK = 4096  # rows per forward pass in validation and refits


def check_int(owner: Any, cfg: dict[str, Any], key: str, minimum: int) -> None:
    """Raise :class:`ConfigError` unless ``cfg[key]`` is an integer ≥ ``minimum``."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{type(owner).__name__}({key}={value!r}): expected an integer >= {minimum}")
    cfg[key] = int(value)


def check_real(owner: Any, cfg: dict[str, Any], key: str, low: float, high: float, *,
               low_open: bool = False, allow_inf: bool = False) -> None:
    """Raise :class:`ConfigError` unless ``cfg[key]`` is a real number in ``[low, high]`` (``(low, high]``)."""
    value = cfg[key]
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value)
    ok = ok and (allow_inf or math.isfinite(value)) and (low < value if low_open else low <= value) and value <= high
    if not ok:
        bounds = f"{'(' if low_open else '['}{low}, {high}]"
        raise ConfigError(f"{type(owner).__name__}({key}={value!r}): expected a number in {bounds}")
    cfg[key] = float(value)


class _Model(nn.Module):
    """The embedding and the estimator's head, copied and saved together."""

    def __init__(self, embedding: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.embedding = embedding
        self.head = head

    def embed(self, inputs: Mapping[str, torch.Tensor | None]) -> torch.Tensor:
        """The embedding ``s``, shape ``(M, E)``."""
        return self.embedding(inputs)


class StepwiseEstimator:
    """Base of Kestrel's estimators: configuration, training loop, sampling and persistence.

    Subclasses define the head (``_make_head``), the per-row loss terms (``_row_terms``), the
    sampler (``_draw``) and optionally an end-of-epoch refit (``_end_epoch``). They work in the
    prior's standard-normal space ``z = prior.to_normal(θ)``; the loader maps ``θ`` into
    ``(z, log|det ∂z/∂θ|)`` once, in float64, in its background thread.

    Keyword args (flat; an unknown one raises ``TypeError`` with a suggestion):
        max_epochs (100): epochs per :meth:`train` call. batch_size (128). lr: Adam learning
        rate. early_stop_patience (16): epochs without a better validation loss before
        stopping. lr_decay_factor (1.0 = off), lr_patience (8): ReduceLROnPlateau on the
        validation loss, never below min_lr (0.0). prior_epochs (0): proposals stay prior draws until this many epochs
        were trained (counted over the estimator's life, ``total_epochs``). gamma (0.5):
        tempering exponent of proposals. cache_sync_every (1): sync the caches every this many
        epochs. max_cache_samples (0 = all): cache at most this many training samples.
        discard_samples (False), log_ratio_threshold (−20): mark a training sample DISFAVOURED
        when ``log q_current(θ_i | x_i) − log_prob_i`` falls below the threshold.
        embedding (None = identity): the embedding config or module. device ("cpu"; "auto" is
        CUDA when available). seed (None: the context's seed).

    Training (:meth:`train`): epochs of ``max(1, count // batch_size)`` steps with an
    ``await asyncio.sleep(0)`` after each, so an async actor serves sampling calls between
    steps; the validation loss is computed in eval mode over the whole validation set and
    changes no state. A deep copy of embedding and head (plain attributes included) is taken
    whenever the validation loss improves; every sampling method uses that best copy while
    training continues. Rows with a non-finite value are left out of every step and counted.

    Raises:
        TypeError: an unknown keyword argument.
        ConfigError: a keyword argument out of range.
    """

    DEFAULTS: ClassVar[dict[str, Any]] = COMMON_DEFAULTS

    def __init__(self, **kwargs: Any) -> None:
        name = type(self).__name__
        for key in kwargs:
            if key not in self.DEFAULTS:
                close = difflib.get_close_matches(key, list(self.DEFAULTS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (expected one of: {', '.join(sorted(self.DEFAULTS))})"
                raise TypeError(f"{name}: unknown keyword argument {key!r}{hint}")
        cfg = {**self.DEFAULTS, **kwargs}
        for key, minimum in (("max_epochs", 0), ("batch_size", 1), ("early_stop_patience", 1), ("lr_patience", 0),
                             ("prior_epochs", 0), ("cache_sync_every", 1), ("max_cache_samples", 0)):
            check_int(self, cfg, key, minimum)
        check_real(self, cfg, "lr", 0.0, math.inf, low_open=True)
        check_real(self, cfg, "lr_decay_factor", 0.0, 1.0, low_open=True)
        check_real(self, cfg, "min_lr", 0.0, cfg["lr"])
        check_real(self, cfg, "gamma", 0.0, math.inf)
        check_real(self, cfg, "log_ratio_threshold", -math.inf, math.inf, allow_inf=True)
        if not isinstance(cfg["discard_samples"], bool):
            raise ConfigError(f"{name}(discard_samples={cfg['discard_samples']!r}): expected true or false")
        if not isinstance(cfg["device"], (str, torch.device)):
            raise ConfigError(f"{name}(device={cfg['device']!r}): expected 'cpu', 'cuda', 'cuda:N' or 'auto'")
        if cfg["seed"] is not None:
            check_int(self, cfg, "seed", 0)
        self._check_extra(cfg)
        self.config: dict[str, Any] = cfg
        self._context: EstimatorContext | None = None
        self._model: _Model | None = None
        self._best: _Model | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scheduler: Any = None
        self._init: dict[str, torch.Tensor] = {}
        self._total_epochs = 0
        self._stop_requested = False
        self._state = "idle"
        self._train_loss: float | None = None
        self._val_loss: float | None = None
        self._best_val_loss: float | None = None
        self._seen_ids = np.empty(0, dtype=np.int64)
        self._nonfinite_rows = 0
        self._skipped_steps = 0
        self._discarded = 0
        self._clipped = 0
        self._error: str | None = None

    # -- hooks -------------------------------------------------------------------------------
    def _check_extra(self, cfg: dict[str, Any]) -> None:
        """Validate subclass keyword arguments in place."""

    def _make_head(self, dim: int, context_dim: int) -> nn.Module:
        raise NotImplementedError

    def _param_groups(self, model: nn.Module) -> list[dict[str, Any]]:
        """Optimiser parameter groups (AdamW; ``weight_decay`` 0 unless a group sets it)."""
        return [{"params": list(model.parameters())}]

    def _row_terms(self, model: nn.Module, z: torch.Tensor, logdet: torch.Tensor, log_prob: torch.Tensor,
                   s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Per-row ``(nll (N,), log importance weight (N,) or None, log q(θ | x) (N,))``."""
        raise NotImplementedError

    def _end_epoch(self, model: nn.Module, loader: CachedDataLoader) -> None:
        """Called after the training steps of an epoch, before validation."""

    def _draw(self, model: nn.Module, n: int, s: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws ``z (n, D)`` and their z-space log density ``(n,)`` given ``s (M, E)``:
        from the posterior (``gamma`` 1) or the γ-tempered proposal."""
        raise NotImplementedError

    def _log_density(self, model: nn.Module, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """Posterior log density in z-space ``(N,)`` of ``z (N, D)`` given ``s (M, E)``, deterministic."""
        raise NotImplementedError

    # -- setup -------------------------------------------------------------------------------
    def setup(self, context: EstimatorContext) -> None:
        """Bind the estimator to its node.

        Raises:
            EstimatorError: the prior lacks the standard-normal bijection, or the node has no
                evidence to condition on.
            ConfigError: an unknown device.
        """
        prior = context.prior
        for attr in ("dim", "full_dim", "sample", "log_prob", "to_normal", "from_normal"):
            if not hasattr(prior, attr):
                raise EstimatorError(f"node {context.node!r}: {type(self).__name__} needs a prior with "
                                     f"{attr!r} (a kestrel_core.Product); got {type(prior).__name__}")
        if not context.evidence:
            raise EstimatorError(f"node {context.node!r}: {type(self).__name__} needs at least one evidence node")
        self._context = context
        self._device = self._resolve_device(self.config["device"])
        seed = self.config["seed"] if self.config["seed"] is not None else context.seed
        seq = np.random.SeedSequence(seed)
        self._model_seed, batch_seed, sample_seed = (int(s) for s in seq.generate_state(3, dtype=np.uint32))
        self._rng = np.random.default_rng(seq.spawn(1)[0])
        self._batch_gen = torch.Generator(self._device).manual_seed(batch_seed)
        self._sample_gen = torch.Generator(self._device).manual_seed(sample_seed)
        self._theta_key = flat_key(context.node, "value")
        self._logp_key = flat_key(context.node, "log_prob")
        self._conditions = tuple(context.evidence) + tuple(context.scaffolds)
        self._cond_keys = {c: flat_key(c, "value") for c in self._conditions}

    def _resolve_device(self, device: Any) -> torch.device:
        if device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise ConfigError(f"{type(self).__name__}(device={device!r}): {err}") from err
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"{type(self).__name__}(device={device!r}): CUDA is not available on this machine")
        return dev

    def _require_setup(self) -> EstimatorContext:
        if self._context is None:
            raise EstimatorError(f"{type(self).__name__}: call setup(context) first")
        return self._context

    @property
    def prior(self) -> Any:
        """The latent node's prior (a :class:`kestrel_core.Product`)."""
        return self._require_setup().prior

    @property
    def total_epochs(self) -> int:
        """Epochs trained over the estimator's life (continues after :meth:`load`)."""
        return self._total_epochs

    def _to_latent(self, theta: np.ndarray) -> np.ndarray:
        """Loader transform: θ ``(N, F)`` → float64 ``(N, D + 1)``: z and ``log|det ∂z/∂θ|``.

        Runs in the loader's background thread; rows with a non-finite θ become NaN rows.
        """
        prior = self.prior
        theta = np.asarray(theta, dtype=np.float64)
        out = np.full((theta.shape[0], prior.dim + 1), np.nan)
        ok = np.isfinite(theta.reshape(theta.shape[0], -1)).all(axis=1)
        if ok.any():
            z, logdet = prior.to_normal(theta[ok], with_logdet=True)
            out[ok, :-1] = z
            out[ok, -1] = logdet
        return out

    # -- model -------------------------------------------------------------------------------
    def _build(self, init: Mapping[str, torch.Tensor]) -> None:
        """Build embedding, head and optimiser from a few training rows of the conditions."""
        cfg, context = self.config, self._require_setup()
        self._init = {c: t.detach()[:2].clone() for c, t in init.items()}
        devices = [self._device] if self._device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self._model_seed)
            embedding = build_embedding(cfg["embedding"], context.evidence, context.scaffolds).to(self._device)
            embedding.eval()
            with torch.no_grad():
                s = embedding(self._init)
            embedding.train()
            if s.dim() != 2 or s.shape[0] != next(iter(self._init.values())).shape[0]:
                raise EstimatorError(f"node {context.node!r}: the embedding returned shape {tuple(s.shape)}; "
                                     "expected (B, E)")
            head = self._make_head(context.prior.dim, int(s.shape[1])).to(self._device)
        self._model = _Model(embedding, head).to(self._device)
        self._model.train()
        self._optimizer = torch.optim.AdamW(self._param_groups(self._model), lr=cfg["lr"], weight_decay=0.0)
        self._scheduler = None
        if cfg["lr_decay_factor"] < 1.0:
            self._scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                self._optimizer, factor=cfg["lr_decay_factor"], patience=cfg["lr_patience"],
                min_lr=cfg["min_lr"])

    def _snapshot(self) -> None:
        """Make the current model the best-so-far model (deep copy: plain attributes survive)."""
        assert self._model is not None  # internal
        best = copy.deepcopy(self._model)
        best.eval()
        self._best = best

    # -- training ----------------------------------------------------------------------------
    def _keys(self) -> list[str]:
        return [self._theta_key, self._logp_key] + [self._cond_keys[c] for c in self._conditions]

    def _loader(self, view: BufferView, statuses: Any, name: str) -> CachedDataLoader:
        return CachedDataLoader(
            view, self._keys(), statuses, self._device,
            transforms={self._theta_key: self._to_latent},
            dtypes={self._theta_key: torch.float64, self._logp_key: torch.float64},
            max_samples=self.config["max_cache_samples"] if statuses == TRAINABLE else 0,
            name=f"{self._require_setup().node}-{name}")

    async def train(self, view: BufferView) -> None:
        """Train on the view's TRAINING/DISFAVOURED samples, validate on its VALIDATION samples.

        Runs at most ``max_epochs`` epochs, fewer on early stopping or :meth:`request_stop`
        (which ends training after the current step). Blocking work (the first cache fill)
        runs in a worker thread, so the event loop stays free.

        Raises:
            EstimatorError: no training samples, an epoch in which every drawn row was
                non-finite, or a failure of the loader (re-raised from its thread).
        """
        context = self._require_setup()
        if self._state == "training":
            raise EstimatorError(f"node {context.node!r}: train() is already running")
        self._state, self._error = "training", None
        train_loader = self._loader(view, TRAINABLE, "train")
        val_loader: CachedDataLoader | None = None
        try:
            await asyncio.to_thread(train_loader.sync)
            self._note_ids(train_loader)
            if int(view.stats().get("validation", 0)) > 0:
                val_loader = self._loader(view, (Status.VALIDATION,), "validation")
                await asyncio.to_thread(val_loader.sync)
            await self._epochs(train_loader, val_loader)
            self._state = "stopped" if self._stop_requested else "done"
        except BaseException as err:
            self._state, self._error = "stopped", f"{type(err).__name__}: {err}"
            raise
        finally:
            self._stop_requested = False
            train_loader.close()
            if val_loader is not None:
                val_loader.close()

    async def _epochs(self, train_loader: CachedDataLoader, val_loader: CachedDataLoader | None) -> None:
        cfg, node = self.config, self._require_setup().node
        best_metric, bad_epochs = math.inf, 0
        for epoch in range(cfg["max_epochs"]):
            if epoch > 0 and epoch % cfg["cache_sync_every"] == 0:
                if train_loader.sync():
                    self._note_ids(train_loader)
                if val_loader is not None:
                    val_loader.sync()
            losses: list[torch.Tensor] = []
            for _ in range(max(1, train_loader.count // cfg["batch_size"])):
                loss = self._train_step(train_loader.sample_batch(cfg["batch_size"], self._batch_gen))
                if loss is not None:
                    losses.append(loss)
                await asyncio.sleep(0)
                if self._stop_requested:
                    break
            if not losses:
                if self._stop_requested:
                    break
                raise EstimatorError(f"node {node!r}: no usable training row in epoch {self._total_epochs + 1} "
                                     f"({self._nonfinite_rows} rows with a non-finite value so far, "
                                     f"{self._skipped_steps} steps with a non-finite loss)")
            model = self._model
            assert model is not None  # built by the first step
            self._end_epoch(model, train_loader)
            await asyncio.sleep(0)  # each phase of the epoch's end is followed by a turn of the event loop
            self._train_loss = float(torch.stack(losses).mean())
            self._val_loss = self._validation_loss(val_loader) if val_loader is not None else None
            await asyncio.sleep(0)
            metric = self._val_loss if self._val_loss is not None else self._train_loss
            if self._val_loss is not None and self._best is not None:
                # the validation set follows the proposals, so losses of different epochs are on
                # different data: compare with the best model's loss on the same, current set
                best_now = self._validation_loss(val_loader, self._best)
                if best_now is not None and math.isfinite(best_now):
                    best_metric = best_now
            self._total_epochs += 1
            if math.isfinite(metric) and metric < best_metric:
                best_metric, bad_epochs = metric, 0
                self._best_val_loss = metric
                self._snapshot()
            else:
                bad_epochs += 1
            if self._scheduler is not None and math.isfinite(metric):
                self._scheduler.step(metric)
            log.info("node %s: epoch %d train %.6g val %s lr %.3g", node, self._total_epochs, self._train_loss,
                     self._val_loss, self._lr())
            if self._stop_requested or bad_epochs >= cfg["early_stop_patience"]:
                break
            await asyncio.sleep(0)

    def _note_ids(self, loader: CachedDataLoader) -> None:
        self._seen_ids = np.union1d(self._seen_ids, loader.ids)

    def _split(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Finite-row mask ``(B,)`` and the condition tensors of a batch."""
        latent, log_prob = batch[self._theta_key], batch[self._logp_key]
        finite = torch.isfinite(latent).all(dim=1) & torch.isfinite(log_prob)
        inputs = {}
        for c in self._conditions:
            t = batch[self._cond_keys[c]]
            inputs[c] = t
            if t.is_floating_point() or t.is_complex():
                finite &= torch.isfinite(t.reshape(t.shape[0], -1)).all(dim=1)
        return finite, inputs

    def _chunks(self, batch: Mapping[str, torch.Tensor], size: int = _CHUNK) -> Iterator[
            tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]]:
        """Finite rows of ``batch`` in chunks: ``(z (n, D), logdet (n,), log_prob (n,), inputs)``."""
        finite, inputs = self._split(batch)
        rows = torch.nonzero(finite).squeeze(1)
        latent, log_prob = batch[self._theta_key], batch[self._logp_key]
        for start in range(0, rows.shape[0], size):
            idx = rows[start:start + size]
            lat = latent[idx]
            yield lat[:, :-1], lat[:, -1], log_prob[idx], {c: t[idx] for c, t in inputs.items()}

    def _train_step(self, batch: Any) -> torch.Tensor | None:
        finite, inputs = self._split(batch)
        n_ok = int(finite.sum())
        self._nonfinite_rows += len(batch) - n_ok
        if n_ok == 0:
            return None
        rows = None if n_ok == len(batch) else torch.nonzero(finite).squeeze(1)
        latent, log_prob = batch[self._theta_key], batch[self._logp_key]
        if rows is not None:
            latent, log_prob = latent[rows], log_prob[rows]
            inputs = {c: t[rows] for c, t in inputs.items()}
        if self._model is None:
            self._build(inputs)
        model, optimizer = self._model, self._optimizer
        assert model is not None and optimizer is not None  # internal
        model.train()
        z, logdet = latent[:, :-1], latent[:, -1]
        nll, log_w, log_q = self._row_terms(model, z, logdet, log_prob, model.embed(inputs))
        loss = self._combine(nll, log_w)
        if not bool(torch.isfinite(loss)):
            self._skipped_steps += 1
            return None
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if self.config["discard_samples"]:
            low = (log_q.detach() - log_prob) < self.config["log_ratio_threshold"]
            mask = low if rows is None else torch.zeros_like(finite).index_put((rows,), low)
            self._discarded += batch.discard(mask)
        return loss.detach()

    @staticmethod
    def _combine(nll: torch.Tensor, log_w: torch.Tensor | None) -> torch.Tensor:
        if log_w is None:
            return nll.mean()
        return (truncated_weights(log_w) * nll).sum()

    @torch.no_grad()
    def _validation_loss(self, loader: CachedDataLoader, model: nn.Module | None = None) -> float | None:
        """Mean (or importance-weighted) loss of ``model`` (default: the current model) over the
        whole validation set, in eval mode.

        Changes no state (case K21): eval mode, no gradient, statistics untouched.
        """
        model = self._model if model is None else model
        if model is None or loader.count == 0:
            return None
        was_training = model.training
        model.eval()
        try:
            nlls, log_ws = [], []
            for z, logdet, log_prob, inputs in self._chunks(loader.all()):
                nll, log_w, _ = self._row_terms(model, z, logdet, log_prob, model.embed(inputs))
                nlls.append(nll)
                if log_w is not None:
                    log_ws.append(log_w)
        finally:
            model.train(was_training)
        if not nlls:
            return None
        return float(self._combine(torch.cat(nlls), torch.cat(log_ws) if log_ws else None))

    # -- control and status ------------------------------------------------------------------
    def request_stop(self) -> None:
        """End a running :meth:`train` after its current step (a later call is also stopped)."""
        self._stop_requested = True

    def _lr(self) -> float | None:
        return float(self._optimizer.param_groups[0]["lr"]) if self._optimizer is not None else None

    def status(self) -> dict[str, Any]:
        """Progress, readable at any time.

        Returns:
            ``state`` ("idle", "training", "done", "stopped"), ``epoch`` (= ``total_epochs``),
            ``max_epochs``, ``train_loss``, ``val_loss``, ``best_val_loss``, ``samples_seen``
            (distinct sample ids the training cache has held), ``lr``, and the counters
            ``nonfinite_rows``, ``skipped_steps``, ``discarded``, ``clipped_directions``,
            ``error`` (text of the exception that ended training, else None).
        """
        return {
            "state": self._state,
            "epoch": self._total_epochs,
            "total_epochs": self._total_epochs,
            "max_epochs": self.config["max_epochs"],
            "train_loss": self._train_loss,
            "val_loss": self._val_loss,
            "best_val_loss": self._best_val_loss,
            "samples_seen": int(self._seen_ids.size),
            "lr": self._lr() if self._optimizer is not None else self.config["lr"],
            "nonfinite_rows": self._nonfinite_rows,
            "skipped_steps": self._skipped_steps,
            "discarded": self._discarded,
            "clipped_directions": self._clipped,
            "error": self._error,
        }

    # -- sampling ----------------------------------------------------------------------------
    def sample_prior(self, n: int) -> Record:
        """``n`` prior draws: ``{"value": float64 (n, F), "log_prob": float64 (n,)}``.

        Raises:
            TypeError, ValueError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        prior = self.prior
        theta = np.asarray(prior.sample(n, self._rng), dtype=np.float64)
        return {"value": theta, "log_prob": np.asarray(prior.log_prob(theta), dtype=np.float64)}

    def sample_posterior(self, n: int, conditions: Mapping[str, Any]) -> Record:
        """``n`` draws from the (proposal-corrected) posterior given ``conditions``.

        Args:
            n: number of draws.
            conditions: evidence node → array ``(n, *D)`` or ``(1, *D)`` (broadcast); other
                nodes are ignored, scaffolds are never used at inference.

        Returns:
            ``{"value": float64 (n, F), "log_prob": float64 (n,)}``; ``log_prob`` is the
            θ-space log density of the distribution the value was drawn from.

        Raises:
            EstimatorError: no trained model yet, or a missing/mis-shaped condition.
        """
        n = check_count(n)
        if self._best is None:
            raise EstimatorError(f"node {self._require_setup().node!r}: sample_posterior needs a trained model; "
                                 "train at least one epoch or load a checkpoint first")
        return self._sample(self._best, n, conditions, 1.0)

    def sample_proposal(self, n: int, conditions: Mapping[str, Any]) -> Record:
        """``n`` draws from the γ-tempered posterior ∝ prior · likelihood^γ (prior draws early on).

        Prior draws are returned before the first epoch, while ``total_epochs < prior_epochs``
        and for ``gamma = 0``. Args, returns and raises as :meth:`sample_posterior`.
        """
        n = check_count(n)
        if self._best is None or self._total_epochs < self.config["prior_epochs"] or self.config["gamma"] == 0:
            return self.sample_prior(n)
        return self._sample(self._best, n, conditions, self.config["gamma"])

    def log_prob(self, theta: Any, conditions: Mapping[str, Any]) -> np.ndarray:
        """Log density of the (proposal-corrected) posterior at ``theta`` given ``conditions``.

        Uses the best-so-far model, like the sampling methods; deterministic.

        Args:
            theta: array ``(N, F)`` inside the prior's support.
            conditions: evidence node → array ``(N, *D)`` or ``(1, *D)``.

        Returns:
            float64 ``(N,)``, θ-space.

        Raises:
            EstimatorError: no trained model, or a missing/mis-shaped condition.
            OutOfSupportError: ``theta`` outside the prior's support.
        """
        context = self._require_setup()
        if self._best is None:
            raise EstimatorError(f"node {context.node!r}: log_prob needs a trained model; "
                                 "train at least one epoch or load a checkpoint first")
        theta = np.asarray(theta, dtype=np.float64)
        if theta.ndim != 2:
            raise EstimatorError(f"node {context.node!r}: log_prob expects theta of shape (N, "
                                 f"{context.prior.full_dim}), got {theta.shape}")
        z, logdet = context.prior.to_normal(theta, with_logdet=True)
        inputs = self._inference_inputs(theta.shape[0], conditions)
        with torch.no_grad():
            s = self._best.embed(inputs)
            log_z = self._log_density(self._best, torch.as_tensor(z, device=self._device), s)
        return log_z.cpu().numpy() + logdet

    def _sample(self, model: _Model, n: int, conditions: Mapping[str, Any], gamma: float) -> Record:
        prior = self.prior
        if n == 0:
            return {"value": np.empty((0, prior.full_dim)), "log_prob": np.empty(0)}
        inputs = self._inference_inputs(n, conditions)
        with torch.no_grad():
            s = model.embed(inputs)
            z, log_z = self._draw(model, n, s, gamma)
        theta, log_dtheta = prior.from_normal(z.cpu().numpy(), with_logdet=True)
        log_prob = log_z.cpu().numpy() - log_dtheta
        return {"value": np.asarray(theta, dtype=np.float64), "log_prob": np.asarray(log_prob, dtype=np.float64)}

    def _inference_inputs(self, n: int, conditions: Mapping[str, Any]) -> dict[str, torch.Tensor | None]:
        """Evidence tensors on the device with leading dimension 1 (all broadcast) or ``n``."""
        context = self._require_setup()
        if not isinstance(conditions, Mapping):
            raise EstimatorError(f"node {context.node!r}: conditions must map node names to arrays, "
                                 f"got {type(conditions).__name__}")
        tensors: dict[str, torch.Tensor] = {}
        for c in context.evidence:
            if c not in conditions:
                raise EstimatorError(f"node {context.node!r}: condition {c!r} is missing (evidence: "
                                     f"{list(context.evidence)}; given: {sorted(map(str, conditions))})")
            tensors[c] = self._condition_tensor(c, conditions[c], n)
        rows = n if any(t.shape[0] == n for t in tensors.values()) else 1
        inputs: dict[str, torch.Tensor | None] = {
            c: t.expand(rows, *t.shape[1:]) if t.shape[0] != rows else t for c, t in tensors.items()}
        for c in context.scaffolds:
            inputs[c] = None
        return inputs

    def _condition_tensor(self, name: str, value: Any, n: int) -> torch.Tensor:
        node = self._require_setup().node
        template = self._init.get(name)
        shape = tuple(template.shape[1:]) if template is not None else None
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
        else:
            array = np.asarray(value)
            if array.ndim and array.shape[0] > 1 and array.strides[0] == 0:
                array = array[:1]  # a broadcast view: keep one row, expand on the device
            if not array.flags.writeable or not array.flags.c_contiguous:
                array = np.ascontiguousarray(array).copy()
            tensor = torch.from_numpy(array)
        if tensor.dim() == 0 or (shape is not None and tuple(tensor.shape[1:]) != shape):
            expected = f"{(1, *shape)} (broadcast) or {(n, *shape)}" if shape is not None else "a leading batch axis"
            raise EstimatorError(f"node {node!r}: condition {name!r} has shape {tuple(tensor.shape)}; expected {expected}")
        k = tensor.shape[0]
        if k not in (1, n):
            raise EstimatorError(f"node {node!r}: condition {name!r} has leading dimension {k}; "
                                 f"expected 1 (broadcast) or {n}")
        dtype = template.dtype if template is not None else None
        return tensor.to(device=self._device, dtype=dtype)

    # -- persistence -------------------------------------------------------------------------
    def save(self, directory: str) -> None:
        """Write ``<directory>/estimator.pt``: current and best models, optimiser, epoch counter.

        Raises:
            EstimatorError: the file cannot be written.
        """
        context = self._require_setup()
        payload: dict[str, Any] = {
            "format": _FORMAT,
            "estimator": type(self).__name__,
            "node": context.node,
            "latent_dim": int(context.prior.dim),
            "total_epochs": self._total_epochs,
            "best_val_loss": self._best_val_loss,
            "init": dict(self._init),
            "model": module_state(self._model) if self._model is not None else None,
            "best": module_state(self._best) if self._best is not None else None,
            "optimizer": self._optimizer.state_dict() if self._optimizer is not None else None,
            "scheduler": self._scheduler.state_dict() if self._scheduler is not None else None,
            "seen_ids": torch.from_numpy(self._seen_ids.copy()),
        }
        write_checkpoint(Path(directory) / CHECKPOINT_FILE, payload)

    def load(self, directory: str) -> None:
        """Restore what :meth:`save` wrote, onto this estimator's device (``weights_only=True``).

        Training resumes from the loaded weights and optimiser state; ``total_epochs`` continues.

        Raises:
            EstimatorError: no checkpoint, or one written by another estimator class, node or
                parameter dimension.
        """
        context = self._require_setup()
        path = Path(directory) / CHECKPOINT_FILE
        payload = read_checkpoint(path, self._device)
        found = (payload.get("estimator"), payload.get("latent_dim"))
        expected = (type(self).__name__, int(context.prior.dim))
        if found != expected:
            raise EstimatorError(f"node {context.node!r}: checkpoint {str(path)!r} holds a {found[0]} over "
                                 f"{found[1]} parameters; expected a {expected[0]} over {expected[1]}")
        self._total_epochs = int(payload["total_epochs"])
        self._best_val_loss = payload.get("best_val_loss")
        self._seen_ids = payload["seen_ids"].cpu().numpy() if "seen_ids" in payload else self._seen_ids
        self._model = self._best = None
        self._optimizer = self._scheduler = None
        if payload["model"] is None:
            return
        self._build(payload["init"])
        assert self._model is not None and self._optimizer is not None  # built above
        load_module_state(self._model, payload["model"], what=f"node {context.node!r} model")
        if payload["best"] is not None:
            best = copy.deepcopy(self._model)
            load_module_state(best, payload["best"], what=f"node {context.node!r} best model")
            best.eval()
            self._best = best
        if payload["optimizer"] is not None:
            self._optimizer.load_state_dict(payload["optimizer"])
        if self._scheduler is not None and payload.get("scheduler") is not None:
            self._scheduler.load_state_dict(payload["scheduler"])
