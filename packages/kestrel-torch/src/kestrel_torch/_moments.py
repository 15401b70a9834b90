"""Running first and second moments in float64, for whitening inputs and outputs of networks.

Shape symbols: N rows in a batch, D features.
"""

from __future__ import annotations

import math

import torch

from ._float64 import KeepFloat64

__all__ = ["RunningMoments"]


class RunningMoments(KeepFloat64):
    """Exponential moving average of the mean and (co)variance of rows, kept in float64.

    The statistics change only through :meth:`update`, and only while the module is in
    training mode; they are buffers (saved, copied, moved with ``.to()`` but never cast by
    ``.float()``: :class:`~kestrel_torch._float64.KeepFloat64` keeps them float64) and never
    carry gradients. The first update sets them from that batch; a later batch of n rows,
    after ``seen`` rows, gets the weight ``max(momentum, n / (seen + n))`` — a plain running
    average until ``momentum`` takes over, so the first batch's noise does not linger — and
    moves the mean towards the batch mean and the covariance towards the batch covariance
    *around the updated running mean* (so a drifting mean widens the estimate instead of
    being ignored).

    Args:
        dim: D.
        momentum: EMA weight of a new batch, in ``(0, 1]``.
        full: keep the full ``(D, D)`` covariance (else only the diagonal, stored as a vector).
        min_var: floor added to the variances when they are read.

    Attributes:
        mean: float64 ``(D,)``.
        cov: float64 ``(D, D)`` if ``full`` else ``(D,)`` (the variances).
        count: int64 scalar, number of rows folded in so far.
    """

    mean: torch.Tensor
    cov: torch.Tensor
    count: torch.Tensor

    def __init__(
        self, dim: int, momentum: float, *, full: bool = False, min_var: float = 1e-20
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.momentum = float(momentum)
        self.full = bool(full)
        self.min_var = float(min_var)
        self.register_buffer("mean", torch.zeros(dim, dtype=torch.float64))
        shape = (dim, dim) if full else (dim,)
        self.register_buffer(
            "cov",
            torch.eye(dim, dtype=torch.float64) if full else torch.ones(shape, dtype=torch.float64),
        )
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch into the statistics (no-op in eval mode or for an empty batch).

        Args:
            x: ``(N, D)``, any floating dtype; non-finite rows must already be removed.
        """
        if not self.training or x.shape[0] == 0:
            return
        x = x.detach().to(torch.float64).reshape(x.shape[0], self.dim)
        n = x.shape[0]
        seen = int(self.count)
        batch_mean = x.mean(0)
        if seen == 0:
            self.mean.copy_(batch_mean)
            centred = x - batch_mean
            batch_cov = centred.T @ centred if self.full else (centred * centred).sum(0)
            self.cov.copy_(batch_cov / max(n - 1, 1))
        else:
            weight = max(self.momentum, n / (seen + n))
            self.mean.add_(weight * (batch_mean - self.mean))
            centred = x - self.mean
            batch_cov = (centred.T @ centred if self.full else (centred * centred).sum(0)) / n
            self.cov.mul_(1.0 - weight).add_(weight * batch_cov)
        self.count.add_(n)

    @property
    def variance(self) -> torch.Tensor:
        """float64 ``(D,)``: the variances plus ``min_var``."""
        var = torch.diagonal(self.cov) if self.full else self.cov
        return var + self.min_var

    @property
    def std(self) -> torch.Tensor:
        """float64 ``(D,)``: square root of :attr:`variance`."""
        return self.variance.sqrt()

    @property
    def covariance(self) -> torch.Tensor:
        """float64 ``(D, D)``: the covariance (diagonal if not ``full``) plus ``min_var·I``."""
        cov = self.cov if self.full else torch.diag(self.cov)
        cov = 0.5 * (cov + cov.T)
        return cov + self.min_var * torch.eye(self.dim, dtype=cov.dtype, device=cov.device)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x − mean) / std`` in float64, shape of ``x``; no gradient reaches the statistics."""
        return (x.to(torch.float64) - self.mean) / self.std

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Log density of ``N(mean, covariance)`` at ``x`` ``(..., D)``: float64 ``(...)``."""
        chol = torch.linalg.cholesky(self.covariance)
        diff = (x.to(torch.float64) - self.mean).unsqueeze(-1)
        t = torch.linalg.solve_triangular(chol, diff, upper=False).squeeze(-1)
        return (
            -0.5 * (t * t).sum(-1)
            - torch.log(torch.diagonal(chol)).sum()
            - 0.5 * self.dim * math.log(2 * math.pi)
        )
