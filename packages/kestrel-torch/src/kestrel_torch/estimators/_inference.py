"""The draws and densities of a :class:`~kestrel_torch.estimators._stepwise.StepwiseEstimator`: prior
draws, posterior draws, γ-tempered proposal draws (the model fixed per resimulation round while
training) and the posterior's log density; all but the prior's from the best model.

The arithmetic is :mod:`._sampling`'s (conditions to tensors, draws and densities mapped back
to θ-space); these are the estimator's public methods around it.
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
    """The sampling and density methods of an estimator (a mixin of ``StepwiseEstimator``)."""

    options: EstimatorOptions
    _fit: FitState
    _conditions: Conditions | None
    _clipped: int
    _proposals: ProposalRounds
    _bound: Callable[[], Binding]

    @property
    def prior(self) -> Any:
        """The latent node's prior (a :class:`kestrel_core.Product`)."""
        return self._bound().context.prior

    def sample_prior(self, n: int, rng: CallRng = None) -> Record:
        """``n`` prior draws from ``rng`` (else the sampling stream): float64 value, log_prob.

        Raises:
            TypeError, ValueError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        return prior_draws(self.prior, n, self._bound().rng if rng is None else rng)

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
        """``n`` draws from the γ-tempered posterior ∝ prior · likelihood^γ (prior draws early on).

        Prior draws are returned before the first epoch, while ``total_epochs < prior_epochs``
        and for ``gamma = 0``. Args, returns and raises as :meth:`sample_posterior`, plus:

        Args:
            round: the resimulation round (:meth:`train`'s ``rounds``): draw from the model
                fixed for it; ``None``, or a round not fixed (training ended before it): the
                current best model.
        """
        n = check_count(n)
        if round is not None and self._proposals.has(round):
            model = self._proposals.model(round)
            if model is None:
                return self.sample_prior(n, rng)
            return self._draw(n, conditions, self.options.gamma, rng, model)
        if self._prior_proposal():
            return self.sample_prior(n, rng)
        return self._draw(n, conditions, self.options.gamma, rng)

    def _prior_proposal(self) -> bool:
        opts = self.options
        return self._fit.best is None or self._fit.epochs < opts.prior_epochs or opts.gamma == 0

    def _fix_proposal(self, k: int) -> None:
        """Round ``k`` draws from the best model as it is now (``None``: from the prior)."""
        self._proposals.fix(k, None if self._prior_proposal() else self._fit.best)

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
        assert model is not None and self._conditions is not None  # checked by the callers
        generator = b.sample_generator if rng is None else call_generator(rng, b.device)
        record = draw(model, b.context.prior, n, self._conditions, conditions, gamma, generator)
        if n:
            self._clipped = model.head.clipped
        return record

    def log_prob(self, theta: Any, conditions: Mapping[str, Any]) -> np.ndarray:
        """Log density of the posterior at ``theta`` given ``conditions``.

        Uses the best model, like the sampling methods; deterministic.

        Args:
            theta: array ``(N, F)`` inside the prior's support.
            conditions: evidence node → array ``(N, *D)`` or ``(1, *D)``.

        Returns:
            float64 ``(N,)``, θ-space.

        Raises:
            EstimatorError: no trained model, or a missing/mis-shaped condition.
            OutOfSupportError: ``theta`` outside the prior's support.
        """
        context = self._bound().context
        model = self._best_model()
        if model is None or self._conditions is None:
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
        return log_density(model, context.prior, theta, self._conditions, conditions)
