"""The head interface: a conditional density ``q(z | s)`` that an estimator trains and samples.

Shape symbols: B rows of a batch, M rows of conditions (1 for a broadcast observation, else
n), n draws, E embedding width, D free parameters of the latent node.

A head lives in the prior's standard-normal space ``z = prior.to_normal(θ)``, where the prior is
``N(0, I)``, and sees the data only through the embedding ``s``. It answers three questions —
:meth:`~PosteriorHead.loss` (per-row training terms), :meth:`~PosteriorHead.sample` (draws from
the γ-tempered posterior) and :meth:`~PosteriorHead.log_prob` (the posterior density) — and may
refit itself in closed form at the end of an epoch. The estimator maps θ to z and back and
adds the Jacobians; the training loop never looks inside a head.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn

from kestrel_torch.estimators._correction import truncated_weights

__all__ = ["PosteriorHead", "RowLoss", "RefitRows"]


class RowLoss(NamedTuple):
    """The per-row terms of a head's loss on B rows.

    Attributes:
        loss: float64 ``(B,)``, the loss of each row (with gradient in training).
        log_weight: float64 ``(B,)``, unnormalised log importance weights of the rows, or
            ``None`` for equal weights.
        log_q: float64 ``(B,)``, ``log q(z_i | s_i)`` in z-space (may carry a gradient).
    """

    loss: torch.Tensor
    log_weight: torch.Tensor | None
    log_q: torch.Tensor

    def total(self) -> torch.Tensor:
        """The loss of the rows together: their mean, or with weights the self-normalised,
        truncated importance-weighted sum (:func:`~kestrel_torch.estimators._correction.truncated_weights`)."""
        if self.log_weight is None:
            return self.loss.mean()
        return (truncated_weights(self.log_weight) * self.loss).sum()

    @staticmethod
    def cat(parts: Sequence[RowLoss]) -> RowLoss:
        """The rows of several parts as one (weights are normalised over all of them)."""
        weights = [p.log_weight for p in parts if p.log_weight is not None]
        return RowLoss(
            torch.cat([p.loss for p in parts]),
            torch.cat(weights) if weights else None,
            torch.cat([p.log_q for p in parts]),
        )


class RefitRows(NamedTuple):
    """A chunk of training rows handed to :meth:`PosteriorHead.refit` (no gradient).

    Attributes:
        z: float64 ``(B, D)``. s: the embedding ``(B, E)``. log_prob: float64 ``(B,)``, z-space
        log density of the distribution each row was drawn from.
    """

    z: torch.Tensor
    s: torch.Tensor
    log_prob: torch.Tensor


class PosteriorHead(nn.Module):
    """Base class of heads: ``q(z | s)`` over the prior's standard-normal space.

    Subclasses implement :meth:`loss`, :meth:`sample` and :meth:`log_prob`; :meth:`refit` (with
    :attr:`refit_rows`) and :meth:`decay_group` are optional.

    Attributes:
        refit_rows: rows :meth:`refit` is given at the end of an epoch (0: no refit).
        clipped: directions the last :meth:`sample` call found without information and left at
            the prior (0 for heads that never clip); reported as ``clipped_directions``.
    """

    refit_rows: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.clipped = 0

    def loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> RowLoss:
        """Per-row training terms on B rows; in training mode it first updates any running
        statistics from the rows, in eval mode it changes nothing.

        Args:
            z: float64 ``(B, D)``. s: the embedding ``(B, E)``.
            log_prob: float64 ``(B,)``, z-space log density of the distribution each row was
                drawn from (the prior or a proposal).
            generator: for any randomness of the loss in training mode; in eval mode the loss
                is deterministic, so that two models are compared on the same terms.
        """
        raise NotImplementedError

    def validation_loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        reference: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> RowLoss:
        """Per-row terms by which models are compared on a validation set (eval mode, no change
        of state). Every model compared on the same rows must be scored against the same
        target, whatever statistics of the buffer it was trained with; ``reference`` is a
        Gaussian of the validation rows shared by all of them (heads that need one). The
        default is :meth:`loss`, for losses whose value depends on the rows alone (the flow's
        atomic loss with fixed atoms).

        Args:
            z, s, log_prob: as for :meth:`loss`.
            reference: ``(mean (D,), covariance (D, D))`` float64, the z-space moments of the
                validation rows, or ``None`` (fewer than two rows): score :meth:`loss`.
        """
        return self.loss(z, s, log_prob)

    def sample(
        self, s: torch.Tensor, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws from the γ-tempered posterior ∝ prior · likelihood^γ (γ = 1: the posterior).

        Args:
            s: the embedding of the conditions ``(M, E)``, M = 1 or n. n: draws. gamma: > 0.
            generator: for the draws.

        Returns:
            ``(z, log_prob)``: float64 ``(n, D)`` and the z-space log density ``(n,)`` of the
            distribution the draws came from.
        """
        raise NotImplementedError

    def log_prob(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """The posterior's z-space log density, deterministic.

        Args:
            z: float64 ``(N, D)``. s: the embedding ``(M, E)``, M = 1 or N.

        Returns:
            float64 ``(N,)``.
        """
        raise NotImplementedError

    def refit(self, rows: Iterable[RefitRows]) -> None:
        """Closed-form refit at the end of an epoch, from up to :attr:`refit_rows` training rows
        in chunks (called in eval mode without gradient). The default does nothing."""

    def decay_group(self) -> dict[str, Any] | None:
        """An optimiser parameter group with weight decay (``{"params": …, "weight_decay": …}``),
        or ``None``; every other parameter is trained without decay."""
        return None
