"""Neural spline flow posterior (zuko), trained with atomic proposal posteriors (APT).

Shape symbols: N samples, M rows of conditions, A atoms per row, E embedding width,
D free parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch
import zuko

from ._estimator import StepwiseEstimator
from ._head import PosteriorHead, RowLoss
from ._moments import RunningMoments
from ._options import FlowOptions

__all__ = ["FlowPosterior", "FlowHead", "atomic_loss"]

_LOG_2PI = math.log(2.0 * math.pi)
_ROWS_PER_PASS = 1 << 16  # rows per flow evaluation while sampling
_VALIDATION_SEED = 0x5EED  # atoms of the validation loss: the same for every model compared


def _affine_nsf(
    features: int, context: int, *, transforms: int, hidden_features: tuple[int, ...], bins: int
) -> zuko.flows.Flow:
    """A conditional affine autoregressive layer followed by a zuko neural spline flow.

    The affine layer (applied first, from data to base) moves and scales each variable as a
    function of the context, so the spline layers see roughly standardised values even where
    the conditional is much narrower than the buffer.
    """
    nsf = zuko.flows.NSF(
        features=features,
        context=context,
        transforms=transforms,
        hidden_features=hidden_features,
        bins=bins,
    )
    affine = zuko.flows.MaskedAutoregressiveTransform(
        features=features, context=context, hidden_features=hidden_features
    )
    return zuko.flows.Flow(transform=[affine, *nsf.transform.transforms], base=nsf.base)


class FlowHead(PosteriorHead):
    """A conditional flow ``q(z | s)`` over the prior's standard-normal space, trained with the
    APT atomic loss (:func:`atomic_loss`).

    The flow models ``w = (z − m) / σ`` in float32, where ``m`` and ``σ`` are the running float64
    mean and standard deviations of the buffer's z (updated by training steps only), so it sees
    O(1) values however far the proposals zoom in; densities are returned in z-space
    (``log q(z) = log q(w) − Σ log σ``) in float64. The flow's context is the embedding
    whitened by running float64 statistics.

    Args:
        dim: D; context_dim: E; transforms, hidden_features, bins: the spline flow;
        momentum: EMA weight of a training batch in the running statistics; num_atoms: atoms
        per row of the training loss (≥ 2).
    """

    def __init__(
        self,
        dim: int,
        context_dim: int,
        *,
        transforms: int,
        hidden_features: Sequence[int],
        bins: int,
        momentum: float,
        num_atoms: int = 10,
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.num_atoms = int(num_atoms)
        self.context_stats = RunningMoments(context_dim, momentum)
        self.latent_stats = RunningMoments(dim, momentum, full=True, min_var=1e-30)
        self.conditional = _affine_nsf(
            dim,
            context_dim,
            transforms=transforms,
            hidden_features=tuple(hidden_features),
            bins=bins,
        )

    @torch.no_grad()
    def observe(self, z: torch.Tensor, s: torch.Tensor) -> None:
        """Update the running statistics from a training batch (no-op in eval mode)."""
        self.context_stats.update(s)
        self.latent_stats.update(z)

    def context(self, s: torch.Tensor) -> torch.Tensor:
        """The flow context: whitened embedding, float32 ``(M, E)``."""
        return self.context_stats.normalize(s).to(torch.float32)

    def _log_scale(self) -> torch.Tensor:
        return torch.log(self.latent_stats.std).sum()

    def log_q(self, z: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """``log q(z | s)`` in z-space, float64; ``z`` ``(..., M, D)``, ``ctx`` ``(M, E)`` → ``(..., M)``."""
        w = self.latent_stats.normalize(z).to(torch.float32)
        return self.conditional(ctx).log_prob(w).to(torch.float64) - self._log_scale()

    def draw(
        self, ctx: torch.Tensor, n: int, tau: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws from ``q`` with its Gaussian base scaled by ``tau`` (1: ``q`` itself).

        Args:
            ctx: context ``(n, E)``, one row per draw.
            n: number of draws. tau: base scale, > 0. generator: for the base draws.

        Returns:
            ``(z, log_density)``: float64 ``(n, D)`` in z-space and the exact z-space log density
            of the distribution drawn from — ``log q(z) + ½|u|²(1 − τ⁻²) − D log τ`` with ``u``
            the base draw.
        """
        dist = self.conditional(ctx)
        u = tau * torch.randn(n, self.dim, generator=generator, device=ctx.device, dtype=ctx.dtype)
        w, ladj = dist.transform.inv.call_and_ladj(u)
        if ladj.dim() == u.dim():
            ladj = ladj.sum(-1)
        sq = (u.to(torch.float64) ** 2).sum(-1)
        log_q = -0.5 * sq - 0.5 * self.dim * _LOG_2PI - ladj.to(torch.float64) - self._log_scale()
        z = self.latent_stats.mean + self.latent_stats.std * w.to(torch.float64)
        return z, log_q + 0.5 * sq * (1.0 - 1.0 / tau**2) - self.dim * math.log(tau)

    # -- the head interface ------------------------------------------------------------------
    def loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> RowLoss:
        """The APT atomic loss of each row (``log_prob`` is not needed: see :func:`atomic_loss`).

        In eval mode the atoms are drawn from a fixed seed, so every model compared on a
        validation set is scored on the same atoms.
        """
        self.observe(z, s)
        if not self.training:
            generator = torch.Generator(z.device).manual_seed(_VALIDATION_SEED)
        loss, log_q = atomic_loss(self, z, self.context(s), self.num_atoms, generator)
        return RowLoss(loss, None, log_q)

    def sample(
        self, s: torch.Tensor, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws from ``q`` with its base scaled by ``τ = 1/√γ`` (γ = 1: ``q`` itself) and
        their exact z-space density, :data:`_ROWS_PER_PASS` rows per flow evaluation."""
        tau = 1.0 / math.sqrt(gamma)
        ctx = self.context(s)
        # a view: never copied n times
        ctx = ctx.expand(n, ctx.shape[1]) if ctx.shape[0] == 1 else ctx
        zs, log_qs = [], []
        for start in range(0, n, _ROWS_PER_PASS):
            z, log_q = self.draw(
                ctx[start : start + _ROWS_PER_PASS], min(_ROWS_PER_PASS, n - start), tau, generator
            )
            zs.append(z)
            log_qs.append(log_q)
        return torch.cat(zs), torch.cat(log_qs)

    def log_prob(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """``log q(z | s)`` in z-space."""
        ctx = self.context(s)
        ctx = ctx.expand(z.shape[0], ctx.shape[1]) if ctx.shape[0] == 1 else ctx
        return self.log_q(z, ctx)


def atomic_loss(
    head: FlowHead,
    z: torch.Tensor,
    ctx: torch.Tensor,
    num_atoms: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss of automatic posterior transformation with atomic proposals.

    Row ``i`` is scored against ``A − 1`` other rows' latents (its atoms):
    ``ℓ_i = −log [ q(z_i | s_i)/π(z_i) / Σ_{j ∈ atoms(i)} q(z_j | s_i)/π(z_j) ]`` with
    ``π = N(0, I)`` the prior in z-space. Minimising it makes ``q`` the posterior whatever
    mixture of prior and proposals the rows were drawn from, without their densities.
    Atoms are the rows at ``(i + o_k) mod B`` for ``A − 1`` distinct random offsets ``o_k``.

    Args:
        head: the flow. z: float64 ``(B, D)``. ctx: ``(B, E)``. num_atoms: A ≥ 2 (capped at B).
        generator: for the offsets.

    Returns:
        ``(loss, log_q)``: float64 ``(B,)`` each — the losses (with ``B = 1`` the plain negative
        log density: no other row to contrast) and ``log q(z_i | s_i)`` of the rows themselves.

    References:
        D. Greenberg, M. Nonnenmacher, J. Macke (2019), "Automatic Posterior Transformation for
        Likelihood-Free Inference", ICML, arXiv:1905.07488.
    """
    b = z.shape[0]
    a = min(int(num_atoms), b)
    if a < 2:
        log_q = head.log_q(z, ctx)
        return -log_q, log_q
    offsets = torch.randperm(b - 1, generator=generator, device=z.device)[: a - 1] + 1
    rows = torch.arange(b, device=z.device)
    # (A, B); row 0: the row itself
    index = torch.cat([rows[None], (rows[None] + offsets[:, None]) % b])
    atoms = z[index]  # (A, B, D)
    log_q = head.log_q(atoms, ctx)  # (A, B)
    logits = log_q + 0.5 * (atoms * atoms).sum(-1)  # log q − log π, up to a constant
    return torch.logsumexp(logits, 0) - logits[0], log_q[0]


class FlowPosterior(StepwiseEstimator):
    """Conditional neural spline flow posterior (zuko), trained with atomic proposal posteriors.

    **Space.** θ is mapped to the unit cube by the prior's CDFs, ``u = prior.to_unit(θ)``, and
    on to the unbounded space ``z = Φ⁻¹(u)`` (Φ the standard-normal CDF) — computed directly
    and tail-accurately by ``prior.to_normal`` — where the prior is ``π = N(0, I)``. The flow
    is fitted there; every draw maps back through ``prior.from_normal``, which lands in the
    prior's support by construction, so samples never leave it. Densities are reported in
    θ-space. The flow is a conditional affine autoregressive layer followed by a neural spline
    flow (``transforms`` spline layers of ``bins`` bins, ``hidden_features`` wide).

    **Proposal correction.** The buffer holds draws from a mixture of the prior and past
    proposals. The flow ``q(z | x)`` is trained with the atomic loss of automatic posterior
    transformation (APT / SNPE-C; Greenberg, Nonnenmacher & Macke 2019, arXiv:1905.07488; see
    :func:`atomic_loss`): each training row's latent is contrasted with ``num_atoms − 1``
    latents of other rows of the batch, which makes ``q`` the posterior ∝ prior × likelihood
    for any proposal mixture. The flow is thus the posterior itself: no density of the buffer
    is divided out afterwards (a division amplifies the flow's errors wherever the buffer is
    about as narrow as the posterior), and the densities of past proposals are never needed.

    **Posterior.** :meth:`sample_posterior` draws from ``q``; ``log_prob`` is its exact density.

    **Proposals.** :meth:`sample_proposal` draws from ``q`` with its Gaussian base scaled by
    ``τ = 1/√γ`` (the "temperature" of Kingma & Dhariwal 2018, arXiv:1807.03039) and reports
    that distribution's exact density. For a Gaussian posterior this is ``q^γ`` normalised —
    ∝ prior · likelihood^γ wherever the prior is flat on the scale of the likelihood. Raising
    the flow's density itself to a power would flatten its tails, which are never learned
    exactly, and widen proposals far beyond the intended width.

    Keyword args (besides those of :class:`StepwiseEstimator`; see
    :class:`~kestrel_torch._options.FlowOptions`): ``transforms=3``,
    ``hidden_features=(64, 64)``, ``bins=8``, ``num_atoms=10`` (≥ 2), ``momentum=0.01``
    (running statistics); ``lr`` defaults to 1e-3.

    Raises:
        TypeError: an unknown keyword argument (with a suggestion).
        ConfigError: a keyword argument out of range.
    """

    options_class: ClassVar[type[FlowOptions]] = FlowOptions
    options: FlowOptions

    def make_head(self, dim: int, context_dim: int) -> FlowHead:
        """The :class:`FlowHead` for D = ``dim``, E = ``context_dim``."""
        o = self.options
        return FlowHead(
            dim,
            context_dim,
            transforms=o.transforms,
            hidden_features=o.hidden_features,
            bins=o.bins,
            momentum=o.momentum,
            num_atoms=o.num_atoms,
        )
