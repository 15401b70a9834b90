"""The buffer columns an estimator trains on, and the rows of a batch in standard-normal space.

Shape symbols: B rows of a batch, F all parameters of the latent node, D its free parameters.

The loader caches ``<node>.value`` already mapped to ``(z, log|det ∂z/∂θ|)`` (float64
``(B, D + 1)``, :meth:`Columns.to_latent`, run in the loader's background thread),
``<node>.log_prob`` and one ``<condition>.value`` per evidence and scaffold node. A row with a
non-finite value in any of them is left out of every step, validation and refit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from kestrel_core import EstimatorContext, flat_key

__all__ = ["Columns", "Rows", "CHUNK", "finite_rows"]

CHUNK = 4096  # rows per forward pass in validation and refits


def finite_rows(t: torch.Tensor) -> torch.Tensor:
    """Which rows of ``t`` (``(B, …)``, floating or complex) hold only finite values: bool
    ``(B,)`` on ``t``'s device.

    On the CPU a row's sum decides first (a NaN or ±inf anywhere makes the sum non-finite, so a
    finite sum proves the row finite: 0.8 ms for 2048 × 1000 float64 on one thread, against
    9.8 ms for ``isfinite(t).all(1)``); only rows whose sum is not finite — a non-finite value,
    or finite values whose sum overflowed — are checked element by element. On other devices
    (no host sync per batch) ``isfinite(t).all(1)``.
    """
    flat = t.reshape(t.shape[0], -1)
    if flat.device.type != "cpu":
        return torch.isfinite(flat).all(dim=1)
    ok = torch.isfinite(flat.sum(dim=1))
    if not bool(ok.all()):
        suspect = torch.nonzero(~ok).squeeze(1)
        ok[suspect] = torch.isfinite(flat[suspect]).all(dim=1)
    return ok


class Rows(NamedTuple):
    """Finite rows of a batch.

    Attributes:
        z: float64 ``(B, D)``. logdet: float64 ``(B,)``, ``log|det ∂z/∂θ|``.
        log_prob: float64 ``(B,)``, θ-space log density of the distribution each row was drawn
            from. inputs: condition node → tensor ``(B, …)``.
    """

    z: torch.Tensor
    logdet: torch.Tensor
    log_prob: torch.Tensor
    inputs: dict[str, torch.Tensor]

    @property
    def z_log_prob(self) -> torch.Tensor:
        """``log_prob`` in z-space: ``log_prob − logdet``, float64 ``(B,)``."""
        return self.log_prob - self.logdet


@dataclass(frozen=True)
class Columns:
    """The flat keys of one latent node's training data.

    Attributes:
        theta: ``"<node>.value"``. log_prob: ``"<node>.log_prob"``.
        conditions: condition node → its ``"<node>.value"`` key, evidence then scaffolds.
        prior: the node's prior (maps θ to z).
    """

    theta: str
    log_prob: str
    conditions: dict[str, str]
    prior: Any

    @classmethod
    def of(cls, context: EstimatorContext) -> Columns:
        """The columns of ``context``'s node."""
        names = tuple(context.evidence) + tuple(context.scaffolds)
        return cls(
            flat_key(context.node, "value"),
            flat_key(context.node, "log_prob"),
            {c: flat_key(c, "value") for c in names},
            context.prior,
        )

    def keys(self) -> list[str]:
        """Every key the loader caches."""
        return [self.theta, self.log_prob, *self.conditions.values()]

    def to_latent(self, theta: np.ndarray) -> np.ndarray:
        """Loader transform: θ ``(N, F)`` → float64 ``(N, D + 1)``: z and ``log|det ∂z/∂θ|``.

        Runs in the loader's background thread; rows with a non-finite θ become NaN rows.
        """
        theta = np.asarray(theta, dtype=np.float64)
        out = np.full((theta.shape[0], self.prior.dim + 1), np.nan)
        ok = np.isfinite(theta.reshape(theta.shape[0], -1)).all(axis=1)
        if ok.any():
            z, logdet = self.prior.to_normal(theta[ok], with_logdet=True)
            out[ok, :-1] = z
            out[ok, -1] = logdet
        return out

    def split(
        self, batch: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Finite-row mask ``(B,)`` and the condition tensors of a batch."""
        latent, log_prob = batch[self.theta], batch[self.log_prob]
        finite = finite_rows(latent) & torch.isfinite(log_prob)
        inputs = {}
        for c, key in self.conditions.items():
            t = batch[key]
            inputs[c] = t
            if t.is_floating_point() or t.is_complex():
                finite &= finite_rows(t)
        return finite, inputs

    def rows(self, batch: Mapping[str, torch.Tensor], index: torch.Tensor | None = None) -> Rows:
        """The rows ``index`` (default: all) of ``batch``."""
        latent, log_prob = batch[self.theta], batch[self.log_prob]
        inputs = {c: batch[key] for c, key in self.conditions.items()}
        if index is not None:
            latent, log_prob = latent[index], log_prob[index]
            inputs = {c: t[index] for c, t in inputs.items()}
        return Rows(latent[:, :-1], latent[:, -1], log_prob, inputs)

    def chunks(self, batch: Mapping[str, torch.Tensor], size: int = CHUNK) -> Iterator[Rows]:
        """The finite rows of ``batch``, ``size`` at a time."""
        finite, _ = self.split(batch)
        if finite.shape[0] <= size and bool(finite.all()):  # one chunk, every row: no gather
            yield self.rows(batch)
            return
        index = torch.nonzero(finite).squeeze(1)
        for start in range(0, index.shape[0], size):
            yield self.rows(batch, index[start : start + size])
