"""Running first and second moments in float64, for whitening inputs and outputs of networks.

Shape symbols: N rows in a batch, D features.

A feature whose training values do not vary (a simulator output that is always exactly 0) has
no scale to whiten by: dividing by its ~0 standard deviation would turn any other value at
inference into a huge input. Such **constant** features (:func:`constant_features`)
are left out of the whitening — their whitened value is 0 whatever the input — so they carry no
information, as they carried none in training.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kestrel_torch.nets._float64 import KeepFloat64

__all__ = ["RunningMoments", "constant_features", "CONSTANT_RTOL"]

#: a feature is constant when its standard deviation is at most this fraction of its mean's
#: magnitude (float64 rounding of a repeated value leaves ~1e-16; real spreads are far larger)
CONSTANT_RTOL = 1e-12


def constant_features(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Which features do not vary: ``sqrt(var) <= CONSTANT_RTOL · |mean|`` (so ``var == 0`` at
    ``mean == 0``).

    The test is relative to the feature's own magnitude: a spread of ``1e-9`` around ``2.75e-3``
    (relative ``4e-7``) is information, the rounding left by averaging one repeated value is
    not.

    Args:
        mean, var: float ``(D,)``, the features' mean and variance (without any floor).

    Returns:
        bool ``(D,)``.
    """
    return var.clamp_min(0.0).sqrt() <= CONSTANT_RTOL * mean.abs()


class RunningMoments(KeepFloat64):
    """Exponential moving average of the mean and (co)variance of rows, kept in float64.

    The statistics change only through :meth:`update`, and only while the module is in
    training mode; they are buffers (saved, copied, moved with ``.to()`` but never cast by
    ``.float()``: :class:`~kestrel_torch.nets._float64.KeepFloat64` keeps them float64) and never
    carry gradients. The first update sets them from that batch; a later batch of n rows,
    after ``seen`` rows, gets the weight ``max(momentum, n / (seen + n))`` — a plain running
    average until ``momentum`` takes over, so the first batch's noise does not linger — and
    moves the mean towards the batch mean and the covariance towards the batch covariance
    *around the updated running mean* (so a drifting mean widens the estimate instead of
    being ignored).

    Besides the moments it keeps the range ``[lo, hi]`` of every row folded in (the training
    data the statistics describe), for telling at inference how far an input lies outside it
    (:mod:`~kestrel_torch.estimators._guards`). Features that are :attr:`constant` in the rows seen are
    left out of :meth:`normalize` (their output is 0).

    Args:
        dim: D.
        momentum: EMA weight of a new batch, in ``(0, 1]``.
        full: keep the full ``(D, D)`` covariance (else only the diagonal, stored as a vector).
        min_var: floor added to the variances when they are read.

    Attributes:
        mean: float64 ``(D,)``.
        cov: float64 ``(D, D)`` if ``full`` else ``(D,)`` (the variances).
        count: int64 scalar, number of rows folded in so far.
        lo, hi: float64 ``(D,)``, the smallest and largest value of each feature folded in
            (``+inf``, ``-inf`` before any row, and after loading a checkpoint written before
            the range was kept: an unknown range).
    """

    mean: torch.Tensor
    cov: torch.Tensor
    count: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    _range_buffers = ("lo", "hi")

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
        self.register_buffer("lo", torch.full((dim,), math.inf, dtype=torch.float64))
        self.register_buffer("hi", torch.full((dim,), -math.inf, dtype=torch.float64))

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        # a checkpoint written before the range was kept: load it with an unknown range
        for name, fill in zip(self._range_buffers, (math.inf, -math.inf)):
            if prefix + name not in state_dict:
                current = self._buffers[name]
                assert current is not None
                state_dict[prefix + name] = torch.full_like(current, fill)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

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
        torch.minimum(self.lo, x.min(0).values, out=self.lo)
        torch.maximum(self.hi, x.max(0).values, out=self.hi)
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
    def constant(self) -> torch.Tensor:
        """bool ``(D,)``: features that did not vary in the rows folded in
        (:func:`constant_features`; none before the first row)."""
        var = torch.diagonal(self.cov) if self.full else self.cov
        return constant_features(self.mean, var)

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
        """``(x − mean) / std`` in float64, shape of ``x`` ``(..., D)``; no gradient reaches the
        statistics. A :attr:`constant` feature gives 0 whatever ``x`` holds: it is left out,
        never divided by its ~0 spread."""
        out = (x.to(torch.float64) - self.mean) / self.std
        return out.masked_fill(self.constant, 0.0)

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
