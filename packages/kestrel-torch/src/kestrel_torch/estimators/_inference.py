"""The draws and densities of a :class:`~kestrel_torch.estimators._stepwise.StepwiseEstimator`: prior
draws, posterior draws, γ-tempered proposal draws (the model fixed per resimulation round while
training) and the posterior's log density; all but the prior's from the best model.

:class:`Inference` is the part of the estimator that does them (the estimator holds one and
its public sampling methods delegate to it). The arithmetic is :mod:`._sampling`'s
(conditions to tensors, draws and densities mapped back to θ-space).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np

from kestrel_core import Record, check_count
from kestrel_torch._errors import EstimatorError
from kestrel_torch.estimators._binding import Binding
from kestrel_torch.estimators._options import EstimatorOptions
from kestrel_torch.estimators._sampling import Conditions, draw, log_density, prior_draws
from kestrel_torch.nets._model import NPEModel
from kestrel_torch.train._fit import FitState
from kestrel_torch.train._pacing import ProposalRounds
from kestrel_torch.train._rng import CallRng, call_generator

__all__ = ["Inference"]


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
    """

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
        """``n`` draws from the γ-tempered posterior (round ``round``'s model if fixed), or
        prior draws early on."""
        n = check_count(n)
        if round is not None and self.proposals.has(round):
            model = self.proposals.model(round)
            if model is None:
                return self.sample_prior(n, rng)
            return self._draw(n, conditions, self._options.gamma, rng, model)
        if self._prior_proposal():
            return self.sample_prior(n, rng)
        return self._draw(n, conditions, self._options.gamma, rng)

    def fix_proposal(self, k: int) -> None:
        """Round ``k`` draws from the best model as it is now (``None``: from the prior)."""
        self.proposals.fix(k, None if self._prior_proposal() else self._fit.best)

    def _prior_proposal(self) -> bool:
        opts = self._options
        return self._fit.best is None or self._fit.epochs < opts.prior_epochs or opts.gamma == 0

    def _best_model(self) -> NPEModel | None:
        return cast("NPEModel | None", self._fit.best)

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
