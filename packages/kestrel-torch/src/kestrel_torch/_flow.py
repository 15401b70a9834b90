"""Neural spline flow posterior (zuko) with an SNPE-A correction by a learned buffer marginal.

Shape symbols: N samples, M rows of conditions, K candidates per draw, E embedding width,
D free parameters.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import zuko
from kestrel_core import ConfigError, EstimatorError
from torch import nn

from ._correction import resample
from ._moments import RunningMoments
from ._train import COMMON_DEFAULTS, StepwiseEstimator, check_int, check_real

__all__ = ["FlowPosterior", "FlowHead"]

_LOG_2PI = math.log(2.0 * math.pi)
_CANDIDATES_PER_PASS = 1 << 16  # K·M rows per flow evaluation while sampling


class FlowHead(nn.Module):
    """A conditional flow ``c(z | s)`` and an unconditional flow ``m(z)`` over the same space.

    Both are zuko neural spline flows over ``w = (z − μ) / σ``, where ``μ``, ``σ`` are running
    float64 statistics of the buffer's z (updated by training steps only); densities are
    returned in z-space (``log p(z) = log p(w) − Σ log σ``) in float64. The embedding is
    whitened by running float64 statistics before it becomes the flow's context. The flows
    themselves run in float32.
    """

    def __init__(self, dim: int, context_dim: int, *, transforms: int, hidden_features: Sequence[int],
                 bins: int, momentum: float) -> None:
        super().__init__()
        self.dim = int(dim)
        self.context_stats = RunningMoments(context_dim, momentum)
        self.latent_stats = RunningMoments(dim, momentum)
        kwargs = {"transforms": transforms, "hidden_features": tuple(hidden_features), "bins": bins}
        self.conditional = zuko.flows.NSF(features=dim, context=context_dim, **kwargs)
        self.marginal = zuko.flows.NSF(features=dim, context=0, **kwargs)

    @torch.no_grad()
    def observe(self, z: torch.Tensor, s: torch.Tensor) -> None:
        """Update the running statistics from a training batch (no-op in eval mode)."""
        self.context_stats.update(s)
        self.latent_stats.update(z)

    def context(self, s: torch.Tensor) -> torch.Tensor:
        """The flow context: whitened embedding, float32 ``(M, E)``."""
        return self.context_stats.normalize(s).to(torch.float32)

    def _w(self, z: torch.Tensor) -> torch.Tensor:
        return self.latent_stats.normalize(z).to(torch.float32)

    def _z(self, w: torch.Tensor) -> torch.Tensor:
        return self.latent_stats.mean + self.latent_stats.std * w.to(torch.float64)

    def _log_scale(self) -> torch.Tensor:
        return torch.log(self.latent_stats.std).sum()

    def log_c(self, z: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """``log c(z | s)`` in z-space, float64; ``z`` ``(..., M, D)``, ``ctx`` ``(M, E)`` → ``(..., M)``."""
        return self.conditional(ctx).log_prob(self._w(z)).to(torch.float64) - self._log_scale()

    def log_m(self, z: torch.Tensor) -> torch.Tensor:
        """``log m(z)`` in z-space, float64; ``z`` ``(..., D)`` → ``(...)``."""
        return self.marginal().log_prob(self._w(z)).to(torch.float64) - self._log_scale()

    def sample_c(self, ctx: torch.Tensor, k: int) -> torch.Tensor:
        """``k`` draws per context row: float64 ``(k, M, D)`` in z-space (global torch RNG)."""
        return self._z(self.conditional(ctx).sample((k,)))

    def sample_m(self, k: int, m: int) -> torch.Tensor:
        """Draws from the marginal: float64 ``(k, m, D)`` in z-space (global torch RNG)."""
        return self._z(self.marginal().sample((k, m)))


class FlowPosterior(StepwiseEstimator):
    """Conditional neural spline flow posterior (zuko), corrected by a learned buffer marginal.

    **Space.** θ is mapped to the unit cube by the prior's CDFs, ``u = prior.to_unit(θ)``, and
    on to the unbounded space ``z = Φ⁻¹(u)`` (Φ the standard-normal CDF) — computed directly
    and tail-accurately by ``prior.to_normal`` — where the prior is ``N(0, I)``. The flows are
    fitted there (standardised by running statistics, see :class:`FlowHead`); every draw maps
    back through ``prior.from_normal``, which lands in the prior's support by construction, so
    posterior samples never leave it. Densities are reported in θ-space.

    **Proposal correction (SNPE-A with learned densities).** The buffer ``p̃(z)`` is a mixture
    of the prior and past proposals. Two flows are trained on the same batches: the conditional
    ``c(z | s)`` (s the embedding of the sample's own conditions) and the unconditional
    ``m(z)``. They learn ``c ≈ p̃(z) L(x | z) / p̃(x)`` and ``m ≈ p̃(z)``, so
    ``π(z) c(z | x) / m(z) ∝ π(z) L(x | z)`` is the posterior whatever the proposal history
    (Papamakarios & Murray 2016, arXiv:1605.06376, with flows in place of Gaussians).

    **Sampling.** Target ``t_γ(z) = π(z) (c(z | x) / m(z))^γ`` — γ = 1 for
    :meth:`sample_posterior`, γ = ``gamma`` for :meth:`sample_proposal` (∝ prior ·
    likelihood^γ). Each draw picks one of ``num_proposals`` candidates — half from ``c``, half
    from ``m`` (a defensive mixture, weighted by the balance heuristic, Veach & Guibas 1995) —
    with probability ∝ ``t_γ / g`` (sampling importance resampling, Rubin 1988). The reported
    ``log_prob`` is ``log t_γ − log Ẑ``, with ``Ẑ`` the mean importance weight (pooled over all
    draws for a broadcast observation): the density of the resampled distribution up to the
    Monte-Carlo error of ``Ẑ``, exact as ``num_proposals`` grows.

    Keyword args (besides those of :class:`StepwiseEstimator`): ``transforms=3``,
    ``hidden_features=(64, 64)``, ``bins=8``, ``num_proposals=256``, ``momentum=0.01``
    (running statistics); ``lr`` defaults to 1e-3.

    Raises:
        TypeError: an unknown keyword argument (with a suggestion).
        ConfigError: a keyword argument out of range.
    """

    DEFAULTS: ClassVar[dict[str, Any]] = {**COMMON_DEFAULTS, "lr": 1e-3, "transforms": 3,
                                          "hidden_features": (64, 64), "bins": 8, "num_proposals": 256,
                                          "momentum": 0.01}

    def _check_extra(self, cfg: dict[str, Any]) -> None:
        check_int(self, cfg, "transforms", 1)
        check_int(self, cfg, "bins", 1)
        check_int(self, cfg, "num_proposals", 2)
        check_real(self, cfg, "momentum", 0.0, 1.0, low_open=True)
        hidden = cfg["hidden_features"]
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence) or not hidden or not all(
                isinstance(h, numbers.Integral) and not isinstance(h, bool) and h >= 1 for h in hidden):
            raise ConfigError(f"FlowPosterior(hidden_features={hidden!r}): expected a non-empty list of positive integers")
        cfg["hidden_features"] = tuple(int(h) for h in hidden)

    def _make_head(self, dim: int, context_dim: int) -> nn.Module:
        cfg = self.config
        return FlowHead(dim, context_dim, transforms=cfg["transforms"], hidden_features=cfg["hidden_features"],
                        bins=cfg["bins"], momentum=cfg["momentum"])

    def _row_terms(self, model: nn.Module, z: torch.Tensor, logdet: torch.Tensor, log_prob: torch.Tensor,
                   s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        head: FlowHead = model.head  # type: ignore[assignment]
        head.observe(z, s)
        log_c = head.log_c(z, head.context(s))
        log_m = head.log_m(z)
        return -(log_c + log_m), None, log_c + logdet

    def _draw(self, model: nn.Module, n: int, s: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        head: FlowHead = model.head  # type: ignore[assignment]
        k = self.config["num_proposals"]
        k_c = (k + 1) // 2
        k_m = k - k_c
        ctx = head.context(s)
        pooled = ctx.shape[0] == 1
        ctx = ctx.expand(n, ctx.shape[1])
        chunk = max(1, _CANDIDATES_PER_PASS // k)
        seed = int(torch.randint(0, 2**62, (1,), generator=self._sample_gen, device=self._sample_gen.device))
        devices = [ctx.device] if ctx.device.type == "cuda" else []
        zs, log_ts, log_zs = [], [], []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            for start in range(0, n, chunk):
                c = ctx[start:start + chunk]
                cand = head.sample_c(c, k_c)
                if k_m:
                    cand = torch.cat([cand, head.sample_m(k_m, c.shape[0])], dim=0)  # (K, m, D)
                log_c, log_m = head.log_c(cand, c), head.log_m(cand)
                log_g = math.log(k_c / k) + log_c
                if k_m:
                    log_g = torch.logaddexp(log_g, math.log(k_m / k) + log_m)
                log_pi = -0.5 * (cand * cand).sum(-1) - 0.5 * head.dim * _LOG_2PI
                log_t = log_pi + gamma * (log_c - log_m)
                index, log_z = resample(log_t - log_g, self._sample_gen)
                cols = torch.arange(c.shape[0], device=c.device)
                zs.append(cand[index, cols])
                log_ts.append(log_t[index, cols])
                log_zs.append(log_z)
        log_z = torch.cat(log_zs)
        if pooled:
            log_z = (torch.logsumexp(log_z, 0) - math.log(n)).expand(n)
        if not bool(torch.isfinite(log_z).all()):
            raise EstimatorError(f"node {self._require_setup().node!r}: importance resampling found no finite "
                                 f"weight among {k} candidates; the flows are not usable (retrain or reload)")
        return torch.cat(zs), torch.cat(log_ts) - log_z
