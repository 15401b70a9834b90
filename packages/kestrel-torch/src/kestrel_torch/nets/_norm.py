"""Online normalisation with exponentially weighted statistics."""

from __future__ import annotations

import torch

from kestrel_torch.nets._float64 import KeepFloat64
from kestrel_torch.nets._lazy import LazyBuffers
from kestrel_torch.nets._moments import constant_features

__all__ = ["RunningNorm"]


class RunningNorm(KeepFloat64, LazyBuffers):
    """Normalise each feature with running mean and variance: ``y = (x - mean) / sqrt(var + eps)``.

    Shape symbols: B batch size, D the per-sample shape (any; fixed by the first call).

    The statistics (float64 buffers ``mean``, ``var`` of shape ``D`` — float64 whatever the
    module is cast to, see :class:`~kestrel_torch.nets._float64.KeepFloat64` — and the int64 update
    count ``count``) are updated only in training mode, from the detached batch, so no gradient
    flows through them; in eval mode the forward never changes any state (so a validation pass
    leaves the model as it was). The first
    training batch sets them; each later one blends in with weight ``momentum``. Rows with a
    non-finite value are left out of the statistics (a batch without a finite row changes
    nothing), so one NaN simulation cannot poison the normalisation.

    Before any statistics exist (eval mode on a fresh module) the forward is the identity.
    The output has the input's dtype and device. A feature that did not vary in the batches
    seen (:attr:`constant`) is left out: its output is 0 whatever the input (never a division
    by its ~0 variance), and :meth:`inverse` gives back the constant.

    Args:
        momentum: weight of a new batch, in (0, 1].
        eps: added to the variance, in the input's units squared.

    Raises:
        ValueError: ``momentum`` outside (0, 1] or ``eps < 0``.

    References:
        T. Finch (2009), "Incremental calculation of weighted mean and variance", §4
        (exponentially weighted mean and variance, here with a whole batch as one update).

    Example:
        >>> norm = RunningNorm(momentum=1.0, eps=0.0)
        >>> y = norm(torch.tensor([[1.0], [3.0]]))
        >>> y.flatten().tolist(), norm.mean.tolist(), norm.var.tolist()
        ([-1.0, 1.0], [2.0], [1.0])
    """

    _lazy_buffers = ("mean", "var")
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, momentum: float = 0.01, eps: float = 1e-8) -> None:
        super().__init__()
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"RunningNorm(momentum={momentum}): expected 0 < momentum <= 1")
        if eps < 0:
            raise ValueError(f"RunningNorm(eps={eps}): expected eps >= 0")
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.register_buffer("mean", torch.empty(0, dtype=torch.float64))
        self.register_buffer("var", torch.empty(0, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    @property
    def fitted(self) -> bool:
        """Whether statistics exist (a training batch was seen or a state was loaded)."""
        return self.mean.numel() > 0

    @property
    def constant(self) -> torch.Tensor:
        """bool ``D``: features that did not vary in the batches seen
        (:func:`~kestrel_torch.nets._moments.constant_features`); empty before any statistics."""
        return constant_features(self.mean, self.var)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x``: tensor ``(B, *D)``; returns ``(B, *D)`` in ``x``'s dtype."""
        if self.training:
            self._update(x.detach())
        if not self.fitted:
            return x
        shift = self.mean.to(x.dtype)
        scale = torch.rsqrt(self.var + self.eps).masked_fill(self.constant, 0.0).to(x.dtype)
        return (x - shift) * scale

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """Undo :meth:`forward`: ``x = y * sqrt(var + eps) + mean``, in ``y``'s dtype (the
        constant itself for a :attr:`constant` feature)."""
        if not self.fitted:
            return y
        scale = torch.sqrt(self.var + self.eps).masked_fill(self.constant, 0.0)
        return y * scale.to(y.dtype) + self.mean.to(y.dtype)

    @torch.no_grad()
    def _update(self, x: torch.Tensor) -> None:
        x = x.to(torch.float64)
        rows = torch.isfinite(x).reshape(x.shape[0], -1).all(dim=1)
        weight = rows.to(torch.float64).reshape(-1, *([1] * (x.dim() - 1)))
        n = weight.sum()
        x = torch.where(weight > 0, x, torch.zeros((), dtype=x.dtype, device=x.device))
        batch_mean = (x * weight).sum(0) / n.clamp_min(1.0)
        batch_var = ((x - batch_mean) ** 2 * weight).sum(0) / n.clamp_min(1.0)
        m = (n > 0).to(torch.float64)  # a batch without finite rows changes nothing
        if not self.fitted:
            self.mean = torch.zeros_like(batch_mean)
            self.var = torch.ones_like(batch_var)
        else:
            m = m * self.momentum
        delta = batch_mean - self.mean
        self.mean += m * delta
        self.var.copy_((1 - m) * (self.var + m * delta**2) + m * batch_var)
        self.count += (n > 0).to(torch.int64)

    def extra_repr(self) -> str:
        shape = tuple(self.mean.shape) if self.fitted else "lazy"
        return f"momentum={self.momentum}, eps={self.eps}, shape={shape}"
