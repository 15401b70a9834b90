"""The draws and densities of a :class:`~kestrel_torch.estimators._stepwise.StepwiseEstimator`: prior
draws, posterior draws, proposal draws (the model fixed per resimulation round while training;
γ-tempered, or truncated: :mod:`._truncation`) and the posterior's log density; all but the
prior's from the best model.

:class:`Inference` is the part of the estimator that does them (the estimator holds one and
its public sampling methods delegate to it). The arithmetic is :mod:`._sampling`'s
(conditions to tensors, draws and densities mapped back to θ-space).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import torch

from kestrel_core import Record, check_count
from kestrel_torch._errors import EstimatorError
from kestrel_torch.estimators._binding import Binding
from kestrel_torch.estimators._options import EstimatorOptions
from kestrel_torch.estimators._sampling import Conditions, draw, log_density, prior_draws
from kestrel_torch.estimators._truncation import (
    THRESHOLD_DRAWS,
    TruncationStats,
    hpr_threshold,
    sample_truncated,
)
from kestrel_torch.nets._model import EstimatorModel
from kestrel_torch.train._fit import FitState
from kestrel_torch.train._pacing import ProposalRounds
from kestrel_torch.train._rng import CallRng, call_generator

__all__ = ["Inference"]

log = logging.getLogger("kestrel_torch")


class Inference:
    """The sampling and density methods of one estimator (held by ``StepwiseEstimator``, whose
    ``prior``, ``sample_prior``, ``sample_posterior``, ``sample_proposal`` and ``log_prob``
    delegate here; arguments, returns and errors as documented there).

    Args:
        options: the estimator's options (``gamma``, ``prior_epochs``).
        fit: the estimator's training state (its best model and epoch counter are read).
        bound: returns the estimator's :class:`~kestrel_torch.estimators._binding.Binding`
            (raises ``EstimatorError`` before ``setup``).
        conditions: returns the estimator's
            :class:`~kestrel_torch.estimators._sampling.Conditions` (``None`` before a model
            is built).

    Attributes:
        proposals: the model each resimulation round's proposal draws from.
        clipped: the head's clipped directions after the latest non-empty draw.
        truncation: what the latest truncated proposal draw did (``None`` before one).
    """

    #: prior candidates a truncated draw tries by rejection per draw asked (at least
    #: :data:`_MIN_CANDIDATES`) before it resamples from the posterior estimate
    _CANDIDATES_PER_DRAW = 1000
    _MIN_CANDIDATES = 100_000

    def __init__(
        self,
        options: EstimatorOptions,
        fit: FitState,
        bound: Callable[[], Binding],
        conditions: Callable[[], Conditions | None],
    ) -> None:
        self._options = options
        self._fit = fit
        self._bound = bound
        self._conditions = conditions
        self.proposals = ProposalRounds()
        self.clipped = 0
        self.truncation: TruncationStats | None = None
        #: (model, round) → the threshold τ of its truncated proposal (a few kept)
        self._thresholds: dict[tuple[Any, int | None], float] = {}
        self._logged: set[tuple[Any, int | None]] = set()

    @property
    def prior(self) -> Any:
        """The latent node's prior (a :class:`kestrel_core.Product`)."""
        return self._bound().context.prior

    def sample_prior(self, n: int, rng: CallRng = None) -> Record:
        """``n`` prior draws from ``rng`` (else the sampling stream): float64 value, log_prob."""
        n = check_count(n)
        return prior_draws(self.prior, n, self._bound().rng if rng is None else rng)

    def sample_posterior(
        self, n: int, conditions: Mapping[str, Any], rng: CallRng = None
    ) -> Record:
        """``n`` draws from the best model's posterior given ``conditions``."""
        n = check_count(n)
        if self._fit.best is None:
            raise EstimatorError(
                f"node {self._bound().context.node!r}: sample_posterior needs a trained "
                "model; train at least one epoch or load a checkpoint first"
            )
        return self._draw(n, conditions, 1.0, rng)

    def sample_proposal(
        self, n: int, conditions: Mapping[str, Any], rng: CallRng = None, round: int | None = None
    ) -> Record:
        """``n`` draws from the proposal of round ``round``'s model if fixed (else the best
        model's) — γ-tempered, or truncated with ``proposal: truncated`` — or prior draws early
        on."""
        n = check_count(n)
        if round is not None and self.proposals.has(round):
            model = self.proposals.model(round)
            if model is None:
                return self.sample_prior(n, rng)
            return self._proposal(n, conditions, rng, model, round)
        if self._prior_proposal():
            return self.sample_prior(n, rng)
        return self._proposal(n, conditions, rng, self._best_model(), None)

    def fix_proposal(self, k: int) -> None:
        """Round ``k`` draws from the best model as it is now (``None``: from the prior)."""
        self.proposals.fix(k, None if self._prior_proposal() else self._fit.best)

    def _prior_proposal(self) -> bool:
        opts = self._options
        if self._fit.best is None or self._fit.epochs < opts.prior_epochs:
            return True
        return opts.gamma == 0 and opts.proposal != "truncated"

    def _proposal(
        self, n: int, conditions: Mapping[str, Any], rng: CallRng, model: Any, round: int | None
    ) -> Record:
        if self._options.proposal != "truncated":
            return self._draw(n, conditions, self._options.gamma, rng, model)
        b, prepared = self._bound(), self._conditions()
        assert prepared is not None  # a model exists
        node, prior = b.context.node, b.context.prior
        for name, value in conditions.items():
            rows = np.shape(value)[0] if np.ndim(value) else 1
            if rows != 1:
                raise EstimatorError(
                    f"node {node!r}: truncated proposals are drawn for one observation; "
                    f"condition {name!r} has {rows} rows"
                )
        np_rng = b.rng if rng is None else rng
        generator = b.sample_generator if rng is None else call_generator(rng, b.device)
        threshold = self._threshold(model, conditions, round)
        record, self.truncation = sample_truncated(
            n,
            lambda k: prior_draws(prior, k, np_rng),
            lambda theta: np.asarray(prior.log_prob(theta), dtype=np.float64),
            lambda k: draw(model, prior, k, prepared, conditions, 1.0, generator),
            lambda theta: log_density(model, prior, theta, prepared, conditions),
            threshold,
            np_rng,
            max_candidates=max(self._CANDIDATES_PER_DRAW * n, self._MIN_CANDIDATES),
        )
        if (model, round) not in self._logged:
            self._logged.add((model, round))
            stats = self.truncation
            log.info(
                "node %s: truncated proposal%s: the region holds about %.3g of the prior "
                "(%d prior draws tried, %d resampled from the posterior estimate; ε = %g)",
                node,
                "" if round is None else f" of round {round}",
                stats.acceptance,
                stats.candidates,
                stats.resampled,
                self._options.truncation,
            )
        return record

    def _threshold(self, model: Any, conditions: Mapping[str, Any], round: int | None) -> float:
        """τ of ``model``'s truncated proposal: from :data:`THRESHOLD_DRAWS` draws of its
        posterior by a generator seeded from the model seed and the round, so a round's region
        is the same whoever asks, whenever."""
        key = (model, round)
        if key not in self._thresholds:
            b, prepared = self._bound(), self._conditions()
            assert prepared is not None
            state = np.random.SeedSequence([b.model_seed, 0 if round is None else round + 1])
            generator = torch.Generator(b.device).manual_seed(int(state.generate_state(1)[0]))
            q = draw(model, b.context.prior, THRESHOLD_DRAWS, prepared, conditions, 1.0, generator)
            if len(self._thresholds) >= 4:
                self._thresholds.clear()
                self._logged.clear()
            self._thresholds[key] = hpr_threshold(q["log_prob"], self._options.truncation)
        return self._thresholds[key]

    def _best_model(self) -> EstimatorModel | None:
        return cast("EstimatorModel | None", self._fit.best)

    def _draw(
        self,
        n: int,
        conditions: Mapping[str, Any],
        gamma: float,
        rng: CallRng,
        model: Any = None,
    ) -> Record:
        model, b = model if model is not None else self._best_model(), self._bound()
        prepared = self._conditions()
        assert model is not None and prepared is not None  # checked by the callers
        generator = b.sample_generator if rng is None else call_generator(rng, b.device)
        record = draw(model, b.context.prior, n, prepared, conditions, gamma, generator)
        if n:
            self.clipped = model.head.clipped
        return record

    def log_prob(self, theta: Any, conditions: Mapping[str, Any]) -> np.ndarray:
        """Log density of the best model's posterior at ``theta`` given ``conditions``."""
        context = self._bound().context
        model = self._best_model()
        prepared = self._conditions()
        if model is None or prepared is None:
            raise EstimatorError(
                f"node {context.node!r}: log_prob needs a trained model; "
                "train at least one epoch or load a checkpoint first"
            )
        theta = np.asarray(theta, dtype=np.float64)
        if theta.ndim != 2:
            raise EstimatorError(
                f"node {context.node!r}: log_prob expects theta of shape (N, "
                f"{context.prior.full_dim}), got {theta.shape}"
            )
        return log_density(model, context.prior, theta, prepared, conditions)
