"""Neural likelihood estimation (NLE): a conditional flow of the data given the parameters; its
posterior is an :class:`~kestrel_torch.estimators._mcmc.MCMCPosterior` over the learned
likelihood.

Shape symbols: B rows of a batch, M rows of conditions, n draws, E embedding width (the data
the flow models), D free parameters, G distinct observations in one draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from kestrel_torch._errors import EstimatorError
from kestrel_torch.estimators._flow import _affine_nsf
from kestrel_torch.estimators._mcmc import MCMCPosterior, log_standard_normal
from kestrel_torch.estimators._options import LikelihoodOptions
from kestrel_torch.estimators._stepwise import StepwiseEstimator
from kestrel_torch.nets._head import PosteriorHead, RowLoss
from kestrel_torch.nets._moments import RunningMoments

__all__ = ["FlowLikelihood", "LikelihoodHead"]

_VALIDATION_SEED = 0x5EED  # stand-ins of constant features in the validation loss


class LikelihoodHead(PosteriorHead):
    """A conditional flow ``q(s | z)`` of the embedded data given the parameters, and the
    posterior ``∝ N(z; 0, I) · q(s | z)`` it implies, sampled by MCMC.

    The flow models the data whitened by running float64 statistics of the training rows,
    ``w = (s − m) / σ`` (:attr:`context_stats`: the same statistics the observation guards
    read), conditioned on ``z`` whitened by the running statistics of the training latents;
    densities are returned in s-space (``log q(s) = log q(w) − Σ log σ``) in float64. A
    feature constant in training is left out of the whitening; in training it is
    replaced by standard-normal noise, so the flow learns it as carrying nothing and its
    density never collapses onto one value.

    Densities are unnormalised: :meth:`log_prob` is ``log N(z) + log q(s | z)``, the
    posterior's log density plus ``log p(s)``, a constant for one observation (what ranks
    draws of one observation, as highest-density checks do).

    Args:
        dim: D; data_dim: E; transforms, hidden_features, bins: the spline flow;
        momentum: EMA weight of a training batch in the running statistics;
        mcmc_steps, proposal_steps: Metropolis steps of a draw at γ = 1 and at γ < 1
        (:class:`~kestrel_torch.estimators._mcmc.MCMCPosterior`).
    """

    def __init__(
        self,
        dim: int,
        data_dim: int,
        *,
        transforms: int,
        hidden_features: Sequence[int],
        bins: int,
        momentum: float,
        mcmc_steps: int,
        proposal_steps: int,
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.mcmc_steps = int(mcmc_steps)
        self.proposal_steps = int(proposal_steps)
        self.context_stats = RunningMoments(data_dim, momentum)
        self.latent_stats = RunningMoments(dim, momentum)
        self.conditional = _affine_nsf(
            data_dim, dim, transforms=transforms, hidden_features=tuple(hidden_features), bins=bins
        )

    def log_likelihood(
        self, s: torch.Tensor, z: torch.Tensor, noise: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``log q(s | z)`` in s-space, float64 ``(N,)``.

        Args:
            s: the data ``(N, E)`` (or ``(1, E)``, broadcast). z: float64 ``(N, D)``.
            noise: ``(N, E)``, values for the constant features (training), or ``None`` (0).
        """
        stats = self.context_stats
        constant = stats.constant
        w = stats.normalize(s)
        if noise is not None and bool(constant.any()):
            w = torch.where(constant, noise.to(w.dtype), w)
        w = w.expand(z.shape[0], w.shape[1]) if w.shape[0] == 1 else w
        ctx = self.latent_stats.normalize(z).to(torch.float32)
        log_q = self.conditional(ctx).log_prob(w.to(torch.float32)).to(torch.float64)
        return log_q - torch.log(stats.std[~constant]).sum()

    # -- the head interface ------------------------------------------------------------------
    def loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> RowLoss:
        """``−log q(s_i | z_i)`` of each row: maximum likelihood of the data given the
        parameters, whatever mixture of prior and proposals the rows were drawn from
        (``log_prob`` is not needed). ``log_q`` is the unnormalised posterior density.

        Raises:
            EstimatorError: the embedding has trainable parameters (the flow would shrink it).
        """
        if self.training and s.requires_grad:
            raise EstimatorError(
                "FlowLikelihood learns the density of the embedding's output, so the embedding "
                "cannot be trained with it (it would shrink to a point): use no embedding, or "
                "one without trainable parameters"
            )
        if self.training:
            self.context_stats.update(s)
            self.latent_stats.update(z)
        noise = None
        if bool(self.context_stats.constant.any()):
            if not self.training:
                generator = torch.Generator(s.device).manual_seed(_VALIDATION_SEED)
            noise = torch.randn(s.shape, generator=generator, device=s.device, dtype=s.dtype)
        log_l = self.log_likelihood(s, z, noise)
        return RowLoss(-log_l, None, log_l + log_standard_normal(z))

    @property
    def posterior(self) -> MCMCPosterior:
        """The posterior of this likelihood, ``∝ N(z; 0, I) · q(s | z)``, sampled by MCMC
        (``mcmc_steps`` steps a draw at γ = 1, ``proposal_steps`` below)."""
        return MCMCPosterior(
            self.log_likelihood,
            self.dim,
            steps=self.mcmc_steps,
            proposal_steps=self.proposal_steps,
        )

    def sample(
        self, s: torch.Tensor, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws from ``∝ N(z; 0, I) · q(s | z)^γ`` by :attr:`posterior`; the
        unnormalised log density of each draw."""
        return self.posterior.sample(s, n, gamma, generator)

    def log_prob(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """``log N(z; 0, I) + log q(s | z)``: the posterior's log density up to ``log p(s)``."""
        return self.posterior.log_prob(z, s)


class FlowLikelihood(StepwiseEstimator):
    """Neural likelihood estimation: a conditional neural spline flow ``q(x | θ)`` (zuko),
    whose posterior ``∝ prior(θ) · q(x_o | θ)`` is sampled by MCMC.

    **Why.** A posterior flow trained on proposal draws needs a correction for them (the
    atomic loss of :class:`~kestrel_torch.FlowPosterior`); a likelihood does not: ``q(x | θ)``
    is the same whatever θ was drawn from, so every simulation of every round is plain
    maximum-likelihood data, and the proposal ∝ prior · likelihood^γ is exact for any γ. On
    posteriors with several modes and sharp ridges from data of few dimensions this is the
    stronger method (Papamakarios, Sterratt & Murray 2019, "Sequential neural likelihood",
    AISTATS, arXiv:1805.07226; Lueckmann et al. 2021 find (S)NLE ahead of (S)NPE on SLCP).
    It models the data, so it suits data of modest dimension (or a fixed summary of it):
    the embedding must have no trainable parameters.

    **Space.** As for the posterior estimators: θ maps to the prior's standard-normal space
    ``z = prior.to_normal(θ)`` (prior ``N(0, I)``), and the flow is conditioned on z.

    **Sampling.** :class:`~kestrel_torch.estimators._mcmc.MCMCPosterior` over the learned
    likelihood (:func:`~kestrel_torch.estimators._mcmc.sample_groups`): prior draws resampled by the
    likelihood, then ``mcmc_steps`` differential-evolution Metropolis steps over a population
    of chains per observation; draws map back through ``prior.from_normal``. The densities it
    reports (``log_prob``, the draws' ``log_prob``) are unnormalised: the log of
    prior × likelihood^γ, which differs from the normalised density by a constant per
    observation.

    Keyword args (besides those of :class:`StepwiseEstimator`; see
    :class:`~kestrel_torch.estimators._options.LikelihoodOptions`): ``transforms=3``,
    ``hidden_features=(64, 64)``, ``bins=8``, ``momentum=0.01``, ``mcmc_steps=50``, ``proposal_steps=10``;
    ``discard_samples`` is refused.

    Raises:
        TypeError: an unknown keyword argument (with a suggestion).
        ConfigError: a keyword argument out of range, or ``discard_samples: true``.
    """

    options_class: ClassVar[type[LikelihoodOptions]] = LikelihoodOptions
    options: LikelihoodOptions

    def make_head(self, dim: int, context_dim: int) -> LikelihoodHead:
        """The :class:`LikelihoodHead` for D = ``dim``, E = ``context_dim``."""
        o = self.options
        return LikelihoodHead(
            dim,
            context_dim,
            transforms=o.transforms,
            hidden_features=o.hidden_features,
            bins=o.bins,
            momentum=o.momentum,
            mcmc_steps=o.mcmc_steps,
            proposal_steps=o.proposal_steps,
        )
