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
_WIDEN = 1.5  # base scale of the widened half of the candidates, for γ = 1
_CAP_ROWS = 16384  # training rows used to set the cap of log π − log m
_CAP_QUANTILE = 0.99


def _affine_nsf(features: int, context: int, *, transforms: int, hidden_features: tuple[int, ...],
                bins: int) -> zuko.flows.Flow:
    """A conditional affine autoregressive layer followed by a zuko neural spline flow.

    The affine layer (applied first, from data to base) moves and scales each variable as a
    function of the context, so the spline layers see roughly standardised values even where
    the conditional is much narrower than the standardised space; without it a narrow
    conditional must be carved out by steep splines and keeps heavy tails.
    """
    nsf = zuko.flows.NSF(features=features, context=context, transforms=transforms,
                         hidden_features=hidden_features, bins=bins)
    affine = zuko.flows.MaskedAutoregressiveTransform(features=features, context=context,
                                                      hidden_features=hidden_features)
    return zuko.flows.Flow(transform=[affine, *nsf.transform.transforms], base=nsf.base)


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
        self.conditional = _affine_nsf(dim, context_dim, **kwargs)
        self.marginal = _affine_nsf(dim, 0, **kwargs)
        self.register_buffer("ratio_cap", torch.tensor(math.inf, dtype=torch.float64))

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

    def log_ratio(self, z: torch.Tensor) -> torch.Tensor:
        """``log π(z) − log m(z)``, capped at :attr:`ratio_cap`, float64 ``(...)``."""
        log_pi = -0.5 * (z * z).sum(-1) - 0.5 * self.dim * _LOG_2PI
        return torch.clamp(log_pi - self.log_m(z), max=float(self.ratio_cap))

    def log_m(self, z: torch.Tensor) -> torch.Tensor:
        """``log m(z)`` in z-space, float64; ``z`` ``(..., D)`` → ``(...)``."""
        return self.marginal().log_prob(self._w(z)).to(torch.float64) - self._log_scale()

    def draw_c(self, ctx: torch.Tensor, scales: torch.Tensor,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draw from ``c`` with its base distribution widened: ``u ~ N(0, τ_k² I)``, ``w = f⁻¹(u)``.

        Args:
            ctx: context ``(M, E)``; scales: float32 ``(K,)``, the base scale τ_k of each
                candidate row (1 draws from ``c`` itself).

        Returns:
            ``(z, log_c, log_base)``: candidates float64 ``(K, M, D)`` in z-space, their
            z-space log density under ``c`` (τ = 1), and ``log|det ∂u/∂z|`` terms folded in as
            ``log_c − log N(u; 0, I)`` so that the density under scale τ is
            ``log_c − log N(u; 0, I) + log N(u; 0, τ² I)`` — returned as ``(K, M)`` float64
            via ``log_base = log N(u; 0, I)`` and the squared norm (see caller).
        """
        dist = self.conditional(ctx)
        k, m = scales.shape[0], ctx.shape[0]
        u = torch.randn(k, m, self.dim, generator=generator, device=ctx.device, dtype=ctx.dtype)
        u = u * scales[:, None, None]
        w, ladj = dist.transform.inv.call_and_ladj(u)
        if ladj.dim() == u.dim():
            ladj = ladj.sum(-1)
        sq = (u.to(torch.float64) ** 2).sum(-1)
        log_base = -0.5 * sq - 0.5 * self.dim * _LOG_2PI
        log_c = log_base - ladj.to(torch.float64) - self._log_scale()
        return self._z(w), log_c, sq


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

    @torch.no_grad()
    def _end_epoch(self, model: nn.Module, loader: Any) -> None:
        """Cap ``log π − log m`` at its 99th percentile over the training set (see class docstring)."""
        head: FlowHead = model.head  # type: ignore[assignment]
        batch = loader.all() if loader.count <= _CAP_ROWS else loader.sample_batch(_CAP_ROWS, self._batch_gen)
        was_training = model.training
        model.eval()
        try:
            head.ratio_cap.fill_(math.inf)
            ratios = [head.log_ratio(z) for z, _, _, _ in self._chunks(batch)]
        finally:
            model.train(was_training)
        if ratios:
            ratio = torch.cat(ratios)
            ratio = ratio[torch.isfinite(ratio)]
            if ratio.numel():
                head.ratio_cap.fill_(float(torch.quantile(ratio, _CAP_QUANTILE)))

    def _draw(self, model: nn.Module, n: int, s: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        head: FlowHead = model.head  # type: ignore[assignment]
        k = self.config["num_proposals"]
        k_c = (k + 1) // 2
        tau = _WIDEN / math.sqrt(min(gamma, 1.0))
        scales = torch.ones(k, dtype=torch.float32, device=s.device)
        scales[k_c:] = tau
        log_mix = torch.log(torch.tensor([k_c / k, (k - k_c) / k], dtype=torch.float64, device=s.device))
        ctx = head.context(s)
        pooled = ctx.shape[0] == 1
        ctx = ctx.expand(n, ctx.shape[1])
        chunk = max(1, _CANDIDATES_PER_PASS // k)
        zs, log_ts, log_zs = [], [], []
        for start in range(0, n, chunk):
            c = ctx[start:start + chunk]
            cand, log_c, sq = head.draw_c(c, scales, self._sample_gen)  # (K, m, D), (K, m), (K, m)
            # density of the candidate mixture (balance heuristic): c itself and c widened by τ
            log_wide = log_c + 0.5 * sq * (1.0 - 1.0 / tau**2) - head.dim * math.log(tau)
            log_g = torch.logaddexp(log_mix[0] + log_c, log_mix[1] + log_wide) if k > k_c else log_c
            log_pi = -0.5 * (cand * cand).sum(-1) - 0.5 * head.dim * _LOG_2PI
            log_t = (1.0 - gamma) * log_pi + gamma * (log_c + head.log_ratio(cand))
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

    def _log_density(self, model: nn.Module, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        head: FlowHead = model.head  # type: ignore[assignment]
        k = self.config["num_proposals"]
        ctx = head.context(s)
        generator = torch.Generator(ctx.device).manual_seed(0)  # deterministic normalising constant
        log_zs = []
        for start in range(0, ctx.shape[0], max(1, _CANDIDATES_PER_PASS // k)):
            c = ctx[start:start + max(1, _CANDIDATES_PER_PASS // k)]
            cand, _, _ = head.draw_c(c, torch.ones(k, device=c.device), generator)
            log_zs.append(torch.logsumexp(head.log_ratio(cand), 0) - math.log(k))  # Ẑ = E_c[π/m]
        log_z = torch.cat(log_zs)
        ctx = ctx.expand(z.shape[0], ctx.shape[1]) if ctx.shape[0] == 1 else ctx
        return head.log_c(z, ctx) + head.log_ratio(z) - log_z
