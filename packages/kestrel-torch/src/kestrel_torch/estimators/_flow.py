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

from kestrel_torch.estimators._options import FlowOptions
from kestrel_torch.estimators._stepwise import StepwiseEstimator
from kestrel_torch.nets._head import PosteriorHead, RowLoss
from kestrel_torch.nets._moments import RunningMoments

__all__ = ["FlowPosterior", "FlowHead", "atomic_loss", "prior_rows"]

_LOG_2PI = math.log(2.0 * math.pi)
_ROWS_PER_PASS = 1 << 16  # rows per flow evaluation while sampling
_VALIDATION_SEED = 0x5EED  # atoms of the validation loss: the same for every model compared


def _affine_nsf(
    features: int, context: int, *, transforms: int, hidden_features: tuple[int, ...], bins: int
) -> zuko.flows.Flow:
    """A zuko neural spline flow between two conditional affine autoregressive layers.

    From data to base: the first affine layer moves and scales each variable as a function of
    the context, so the spline layers see roughly standardised values even where the
    conditional is much narrower than the buffer; the last one maps the splines' output onto
    the standard-normal base. Without that last layer the splines meet the base directly and,
    where no training row constrains them, send base draws far from the posterior: on example
    06 (a ridge 12–25× narrower than the prior, trained with proposals) 1.5–2.6 % of the
    posterior draws lay beyond 4 σ (Mahalanobis, up to 76 σ; the exact posterior: 0.01 %) and
    inflated the posterior σ 1.06–1.36×, while the core's width was right; with it, 0.7–3.1 %
    and 0.88–1.06× in four of five runs (1.22–1.33× in the fifth; examples/06_sir/README.md).
    """
    nsf = zuko.flows.NSF(
        features=features,
        context=context,
        transforms=transforms,
        hidden_features=hidden_features,
        bins=bins,
    )

    def affine() -> zuko.flows.MaskedAutoregressiveTransform:
        return zuko.flows.MaskedAutoregressiveTransform(
            features=features, context=context, hidden_features=hidden_features
        )

    return zuko.flows.Flow(transform=[affine(), *nsf.transform.transforms, affine()], base=nsf.base)


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
        per row of the training loss (≥ 2); plain_prior_rows: rows that carry the prior's
        log density (:func:`prior_rows`) get the plain maximum-likelihood loss
        ``−log q(z | s)`` of amortised NPE instead of the atomic one (one flow evaluation a row
        instead of ``num_atoms``; the same minimiser for prior rows, and the truncated
        posterior's). :class:`FlowPosterior` sets it for an ``amortized`` estimator (rows
        drawn from the prior) and for truncated proposals (TSNPE, :mod:`._truncation`: rows
        drawn from the prior restricted to a region, which record the prior's density).
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
        plain_prior_rows: bool = False,
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.num_atoms = int(num_atoms)
        self.plain_prior_rows = bool(plain_prior_rows)
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
        """The APT atomic loss of each row (``log_prob`` is not needed: see :func:`atomic_loss`);
        with ``plain_prior_rows``, the plain ``−log q(z | s)`` of every row that carries the
        prior's density (:func:`prior_rows`).

        In eval mode the atoms are drawn from a fixed seed, so every model compared on a
        validation set is scored on the same atoms.
        """
        self.observe(z, s)
        if not self.training:
            generator = torch.Generator(z.device).manual_seed(_VALIDATION_SEED)
        # rows that carry the prior's density (prior draws, truncated-prior draws) need no
        # atoms; a row that does not (a buffer kept from a run with proposals) still gets its
        # atomic loss
        plain = prior_rows(z, log_prob) if self.plain_prior_rows else None
        loss, log_q = atomic_loss(self, z, self.context(s), self.num_atoms, generator, plain)
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


def prior_rows(z: torch.Tensor, log_prob: torch.Tensor) -> torch.Tensor:
    """Which rows were drawn from the prior: their recorded z-space density is ``N(0, I)``'s.

    A row drawn from the prior carries the prior's density, which in z-space is the standard
    normal's up to rounding (``≤ 1e-6`` apart, relative to the magnitude); a proposal's
    density differs from it by O(1) almost everywhere. A proposal that *is* the prior (γ = 0,
    or an estimator that has not trained yet) is one, and counts as the prior.

    Args:
        z: float64 ``(B, D)``. log_prob: float64 ``(B,)``, z-space log density of the
            distribution each row was drawn from.

    Returns:
        bool ``(B,)``.
    """
    log_prior = -0.5 * (z * z).sum(-1) - 0.5 * z.shape[-1] * _LOG_2PI
    return (log_prob - log_prior).abs() <= 1e-6 * (1.0 + log_prior.abs())


def atomic_loss(
    head: FlowHead,
    z: torch.Tensor,
    ctx: torch.Tensor,
    num_atoms: int,
    generator: torch.Generator | None = None,
    from_prior: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss of automatic posterior transformation with atomic proposals.

    Row ``i`` is scored against ``A − 1`` other rows' latents (its atoms):
    ``ℓ_i = −log [ q(z_i | s_i)/π(z_i) / Σ_{j ∈ atoms(i)} q(z_j | s_i)/π(z_j) ]`` with
    ``π = N(0, I)`` the prior in z-space. Minimising it makes ``q`` the posterior whatever
    mixture of prior and proposals the rows were drawn from, without their densities.
    Atoms are the rows at ``(i + o_k) mod B`` for ``A − 1`` distinct random offsets ``o_k``.

    Rows drawn from the prior (``from_prior``) need no atoms: for them the maximum-likelihood
    loss of amortised NPE, ``ℓ_i = −log q(z_i | s_i)``, has the same minimiser, the posterior,
    at one flow evaluation instead of A (sbi's ``use_combined_loss`` adds this term for prior
    rows to their atomic loss; here it replaces it). All flow evaluations of a batch — the prior
    rows' own and the other rows' atoms — are one call of the flow. :class:`FlowHead` marks
    prior rows only with ``plain_prior_rows`` (amortized or truncated): in a run with proposals the plain loss on its first
    prior rows made the flow fit the whole prior range before zooming in (example 01: σ 1.4–1.9×
    too wide after 120 s, against 0.9–1.1× with atoms for every row; 2026-12-01).

    Args:
        head: the flow. z: float64 ``(B, D)``. ctx: ``(B, E)``. num_atoms: A ≥ 2 (capped at B).
        generator: for the offsets. from_prior: bool ``(B,)``, rows drawn from the prior
            (:func:`prior_rows`); ``None``: none.

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
    if from_prior is None or not bool(from_prior.any()):
        # (A, B); row 0: the row itself
        index = torch.cat([rows[None], (rows[None] + offsets[:, None]) % b])
        atoms = z[index]  # (A, B, D)
        log_q = head.log_q(atoms, ctx)  # (A, B)
        logits = log_q + 0.5 * (atoms * atoms).sum(-1)  # log q − log π, up to a constant
        return torch.logsumexp(logits, 0) - logits[0], log_q[0]
    plain, contrast = rows[from_prior], rows[~from_prior]
    index = torch.cat([contrast[None], (contrast[None] + offsets[:, None]) % b])  # (A, C)
    flat = torch.cat([plain, index.reshape(-1)])  # each evaluation's latent row
    owner = torch.cat([plain, contrast.repeat(a)])  # and the row whose context it takes
    log_q_all = head.log_q(z[flat], ctx[owner])
    n = plain.shape[0]
    empty = log_q_all.new_empty(b)
    log_q = empty.index_put((plain,), log_q_all[:n])
    loss = empty.index_put((plain,), -log_q_all[:n])
    if contrast.numel():
        atoms_q = log_q_all[n:].reshape(a, -1)  # (A, C)
        atoms = z[index]
        logits = atoms_q + 0.5 * (atoms * atoms).sum(-1)
        log_q = log_q.index_put((contrast,), atoms_q[0])
        loss = loss.index_put((contrast,), torch.logsumexp(logits, 0) - logits[0])
    return loss, log_q


class FlowPosterior(StepwiseEstimator):
    """Conditional neural spline flow posterior (zuko), trained with atomic proposal posteriors.

    **Space.** θ is mapped to the unit cube by the prior's CDFs, ``u = prior.to_unit(θ)``, and
    on to the unbounded space ``z = Φ⁻¹(u)`` (Φ the standard-normal CDF) — computed directly
    and tail-accurately by ``prior.to_normal`` — where the prior is ``π = N(0, I)``. The flow
    is fitted there; every draw maps back through ``prior.from_normal``, which lands in the
    prior's support by construction, so samples never leave it. Densities are reported in
    θ-space. The flow is a neural spline flow (``transforms`` spline layers of ``bins`` bins,
    ``hidden_features`` wide) between two conditional affine autoregressive layers.

    **Proposal correction.** The buffer holds draws from a mixture of the prior and past
    proposals. The flow ``q(z | x)`` is trained with the atomic loss of automatic posterior
    transformation (APT / SNPE-C; Greenberg, Nonnenmacher & Macke 2019, arXiv:1905.07488; see
    :func:`atomic_loss`): each training row's latent is contrasted with ``num_atoms − 1``
    latents of other rows of the batch, which makes ``q`` the posterior ∝ prior × likelihood
    for any proposal mixture. An ``amortized: true`` estimator trains on prior draws only and
    takes the plain maximum-likelihood loss of amortised NPE instead (Papamakarios & Murray
    2016), one flow evaluation a row instead of ``num_atoms``. The flow is thus the posterior
    itself: no density of the buffer
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
    :class:`~kestrel_torch.estimators._options.FlowOptions`): ``transforms=3``,
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
            plain_prior_rows=o.amortized or o.proposal == "truncated",
        )
