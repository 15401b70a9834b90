"""Full-covariance Gaussian posterior in the prior's standard-normal space.

Shape symbols: N samples, M rows of conditions, E embedding width, D free parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar, cast

import torch
from torch import nn

from kestrel_torch.estimators._correction import (
    GaussianFactor,
    gaussian_posterior,
    truncated_weights,
)
from kestrel_torch.estimators._options import GaussianOptions
from kestrel_torch.estimators._stepwise import StepwiseEstimator
from kestrel_torch.nets._head import PosteriorHead, RefitRows, RowLoss
from kestrel_torch.nets._moments import RunningMoments

__all__ = ["GaussianPosterior", "GaussianHead"]

_LOG_2PI = math.log(2.0 * math.pi)
_REFIT_MAX_FEATURES = 256  # widest embedding whose linear path is refitted in closed form


class GaussianHead(PosteriorHead):
    """``q(z | s) = N(μ(s), Σ)`` and the reference Gaussian ``r(z)`` of the buffer.

    * ``μ(s) = m_r + σ_r ⊙ (MLP(ŝ) + W ŝ)`` where ``ŝ`` is the embedding ``s`` whitened by
      running float64 statistics, the MLP (``num_layers`` ReLU layers of ``hidden_dim``) and the
      linear skip ``W`` run in float32, and ``m_r``, ``σ_r`` are the running float64 mean and
      standard deviation of z: the network predicts a residual relative to a float64 running
      mean, so the mean keeps float64 precision where the buffer is narrow.
    * ``r = N(m_r, R)``: running mean and full covariance of the buffer's z (updated only by
      training steps, momentum ``momentum``).
    * ``Σ``: the importance-weighted covariance of the residuals ``z − μ(s)``, refitted in
      float64 over the training set at the end of every epoch (:meth:`refit`), floored at
      ``min_var``. It is a buffer, never a gradient target. ``W`` is refitted in closed form
      just before (:meth:`refit_linear`, when E ≤ 256).

    Args:
        dim: D; context_dim: E; hidden_dim, num_layers: MLP size; momentum: EMA weight of a
        training batch in the running statistics; min_var: variance floor; weight_decay: of the
        MLP's weight matrices (:meth:`decay_group`).
    """

    refit_rows = 16384  # rows used for the closed-form refits at the end of an epoch
    residual_cov: torch.Tensor
    net: nn.Sequential

    def __init__(
        self,
        dim: int,
        context_dim: int,
        *,
        hidden_dim: int,
        num_layers: int,
        momentum: float,
        min_var: float,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.min_var = float(min_var)
        self.weight_decay = float(weight_decay)
        self.context_stats = RunningMoments(context_dim, momentum, min_var=1e-20)
        self.latent_stats = RunningMoments(dim, momentum, full=True, min_var=min_var)
        layers: list[nn.Module] = []
        width = context_dim
        for _ in range(num_layers):
            layers += [nn.Linear(width, hidden_dim), nn.ReLU()]
            width = hidden_dim
        layers.append(nn.Linear(width, dim))
        self.net = nn.Sequential(*layers)
        self.skip = nn.Linear(context_dim, dim, bias=False)
        nn.init.zeros_(self._output.weight)
        nn.init.zeros_(self._output.bias)
        self.register_buffer("residual_cov", torch.eye(dim, dtype=torch.float64))

    @property
    def _output(self) -> nn.Linear:
        """The MLP's output layer."""
        return cast(nn.Linear, self.net[-1])

    def _apply(self, fn, recurse: bool = True):  # ``.float()`` must not round the covariance
        before = self.residual_cov
        out = super()._apply(fn, recurse)
        if self.residual_cov.dtype != torch.float64:
            self.residual_cov = before.to(device=self.residual_cov.device)
        return out

    @torch.no_grad()
    def observe(self, z: torch.Tensor, s: torch.Tensor) -> None:
        """Update the running statistics from a training batch (no-op in eval mode)."""
        if not self.training:
            return
        first = int(self.latent_stats.count) == 0
        self.context_stats.update(s)
        self.latent_stats.update(z)
        if first:
            self.residual_cov.copy_(self.latent_stats.covariance)

    def features(self, s: torch.Tensor) -> torch.Tensor:
        """The whitened embedding ``ŝ``, float32 ``(M, E)``."""
        return self.context_stats.normalize(s).to(torch.float32)

    def whitened_mean(self, h: torch.Tensor) -> torch.Tensor:
        """``MLP(ŝ) + W ŝ``, float64 ``(M, D)``, from the features ``ŝ``."""
        return (self.net(h) + self.skip(h)).to(torch.float64)

    def mean(self, s: torch.Tensor) -> torch.Tensor:
        """``μ(s)``: float64 ``(M, D)`` from the embedding ``s`` ``(M, E)``."""
        return self.latent_stats.mean + self.latent_stats.std * self.whitened_mean(self.features(s))

    @torch.no_grad()
    def refit_linear(self, h: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> None:
        """Solve the linear path in closed form: weighted ridge regression of the target on ŝ.

        Sets ``W`` (the skip layer) and shifts the MLP's output bias so that ``MLP(ŝ) + W ŝ``
        best fits ``target`` given the current MLP; the ridge penalty is chosen by generalised
        cross-validation over a grid (Golub, Heath & Wahba 1979, Technometrics 21(2)). This is
        an exact block-coordinate step of the training objective in the linear parameters,
        which stochastic gradients reach only slowly when the features are correlated.

        Args:
            h: features ``(N, E)``; target: float64 ``(N, D)``, the whitened ``(z − m_r)/σ_r``
                minus the MLP output; weights: float64 ``(N,)`` summing to 1.
        """
        h = h.to(torch.float64)
        h_mean = weights @ h
        t_mean = weights @ target
        root = weights.sqrt()[:, None]
        hc, tc = (h - h_mean) * root, (target - t_mean) * root
        evals, evecs = torch.linalg.eigh(hc.T @ hc)
        evals = evals.clamp_min(0.0)
        proj = evecs.T @ (hc.T @ tc)  # (E, D)
        n_eff = 1.0 / float((weights * weights).sum())
        scale = float(evals.sum()) / max(evals.numel(), 1)
        if not scale > 0:
            return
        total = float((tc * tc).sum())
        best = None
        for lam in scale * 10.0 ** torch.arange(-10.0, 3.0, dtype=torch.float64):
            shrink = evals / (evals + lam)
            rss = total - float(
                (
                    (2.0 * shrink - shrink**2)
                    / evals.clamp_min(1e-300)
                    * (proj * proj).sum(1)
                    * (evals > 0)
                ).sum()
            )
            dof = float(shrink.sum())
            if dof >= n_eff:
                continue
            gcv = rss / (1.0 - dof / n_eff) ** 2
            if best is None or gcv < best[0]:
                best = (gcv, lam)
        if best is None:
            return
        coef = evecs @ (proj / (evals + best[1])[:, None])  # (E, D)
        self.skip.weight.copy_(coef.T.to(self.skip.weight.dtype))
        bias = t_mean - h_mean @ coef
        self._output.bias.add_(bias.to(self._output.bias.dtype))

    def log_q(self, z: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """``log N(z; mean, Σ)`` in z-space: float64 ``(N,)``."""
        return _log_normal(z, mean, self.residual_cov)

    def log_ref(self, z: torch.Tensor) -> torch.Tensor:
        """``log r(z)`` in z-space: float64 ``(N,)``."""
        return self.latent_stats.log_prob(z)

    def factor(self, mean: torch.Tensor, gamma: float) -> GaussianFactor:
        """The corrected, γ-tempered posterior for the means ``(M, D)`` (see :func:`gaussian_posterior`)."""
        return gaussian_posterior(
            mean, self.residual_cov, self.latent_stats.mean, self.latent_stats.covariance, gamma
        )

    @torch.no_grad()
    def refit_covariance(self, residuals: torch.Tensor, weights: torch.Tensor) -> None:
        """Set Σ to ``Σ_i w_i r_i r_iᵀ + min_var·I`` (``weights`` sum to 1)."""
        cov = (residuals * weights[:, None]).T @ residuals
        eye = torch.eye(self.dim, dtype=torch.float64, device=cov.device)
        self.residual_cov.copy_(0.5 * (cov + cov.T) + self.min_var * eye)

    # -- the head interface ------------------------------------------------------------------
    def loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> RowLoss:
        """Per-row ``−log q(z | s)``, weighted to the reference: ``log w = log r(z) − log_prob``."""
        self.observe(z, s)
        log_q = self.log_q(z, self.mean(s))
        return RowLoss(-log_q, self.log_ref(z).detach() - log_prob, log_q)

    def validation_loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        reference: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> RowLoss:
        """Per-row ``−log p_c(z | s)``, the posterior under the validation rows' own Gaussian
        ``r_c = N(reference)``, with rows weighted to ``r_c``: ``log w = log r_c(z) − log_prob``.

        :meth:`loss` scores ``q``, which fits ``r · L`` for this head's own reference ``r`` (the
        running moments of the buffer it was trained on): heads with different references are
        scored against different targets, and a head whose reference is narrower around the
        rows can win for that alone, with a worse likelihood (a best model kept from an
        earlier epoch against the model in training; ``tests/torch/test_model_selection.py``
        builds such a pair). Here the
        learned likelihood ``L = q / r`` of every head is combined with the common ``r_c`` in
        closed form (:func:`~kestrel_torch.estimators._correction.gaussian_posterior` with ``prior =
        r_c``). ``r_c`` is close to the distribution the rows were drawn from, so the weights
        stay near 1, and the expected score — the cross-entropy of the ``r_c``-posterior — is
        smallest for the true likelihood.

        Args:
            z, s, log_prob: as for :meth:`loss`. reference: ``(mean, covariance)`` of the
                validation rows' z, or ``None``: :meth:`loss`.
        """
        if reference is None:
            return self.loss(z, s, log_prob)
        mean, cov = reference
        factor = gaussian_posterior(
            self.mean(s),
            self.residual_cov,
            self.latent_stats.mean,
            self.latent_stats.covariance,
            1.0,
            prior=(mean, cov),
        )
        log_post = factor.log_prob(z)
        log_ref = _log_normal(z, mean, cov)
        return RowLoss(-log_post, log_ref - log_prob, log_post)

    def sample(
        self, s: torch.Tensor, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws from the corrected, γ-tempered posterior and their exact z-space density;
        sets :attr:`clipped`."""
        factor = self.factor(self.mean(s), gamma)
        self.clipped = factor.clipped
        z = factor.sample(n, generator)
        return z, factor.log_prob(z)

    def log_prob(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """The corrected posterior's z-space log density."""
        return self.factor(self.mean(s), 1.0).log_prob(z)

    @torch.no_grad()
    def refit(self, rows: Iterable[RefitRows]) -> None:
        """Refit the linear path (when E ≤ 256) and then Σ in closed form over the rows."""
        zs, hs, log_w = [], [], []
        for chunk in rows:
            zs.append(chunk.z)
            hs.append(self.features(chunk.s))
            log_w.append(self.log_ref(chunk.z) - chunk.log_prob)
        if not zs:
            return
        z, h = torch.cat(zs), torch.cat(hs)
        weights = truncated_weights(torch.cat(log_w))
        if float(weights.sum()) <= 0:
            return
        stats = self.latent_stats
        if h.shape[1] <= _REFIT_MAX_FEATURES:
            target = (z - stats.mean) / stats.std - self.net(h).to(torch.float64)
            self.refit_linear(h, target, weights)
        mean = stats.mean + stats.std * self.whitened_mean(h)
        self.refit_covariance(z - mean, weights)

    def decay_group(self) -> dict[str, Any]:
        """The MLP's weight matrices, with ``weight_decay``."""
        return {
            "params": [m.weight for m in self.net if isinstance(m, nn.Linear)],
            "weight_decay": self.weight_decay,
        }


def _log_normal(z: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor) -> torch.Tensor:
    chol = torch.linalg.cholesky(cov)
    t = torch.linalg.solve_triangular(chol, (z - mean).T, upper=False)
    return (
        -0.5 * (t * t).sum(0) - torch.log(torch.diagonal(chol)).sum() - 0.5 * z.shape[-1] * _LOG_2PI
    )


class GaussianPosterior(StepwiseEstimator):
    """Full-covariance Gaussian posterior in the prior's standard-normal space.

    The latent node's values θ are mapped to ``z = prior.to_normal(θ)``, where the prior is
    ``N(0, I)``; the estimator fits ``q(z | x) = N(μ(s), Σ)`` (see :class:`GaussianHead`) with
    ``s = embedding(conditions)``, and reports densities in θ-space,
    ``log p(θ) = log p(z) + log|det ∂z/∂θ|``. Means, covariances and densities are float64
    (example 04 needs posterior standard deviations of 6.7e-9 at z ≈ 5).

    **Proposal correction.** The buffer holds draws from a mixture of the prior and past
    proposals. Each training sample i carries the log density of the distribution it was drawn
    from (``<node>.log_prob``, in θ-space; ``q_i(z) = q_i(θ) / |det ∂z/∂θ|``). The loss
    reweights the buffer to a Gaussian *reference* ``r = N(m_r, R)`` — the running mean and
    covariance of the buffer's z — with self-normalised, truncated importance weights
    ``w_i ∝ r(z_i) / q_i(z_i)`` (SNPE-B style, Lueckmann et al. 2017, arXiv:1711.01861;
    truncation: Ionides 2008). The weighted buffer is distributed as ``r(z) p(x | z)``, whose
    posterior ``∝ r · L`` a Gaussian fits exactly for a linear-Gaussian model, and
    ``r`` is then divided out in closed form (SNPE-A, Papamakarios & Murray 2016,
    arXiv:1605.06376): the posterior is ``π(z) · q(z | x) / r(z)``. Because r follows the
    buffer, the weights stay near 1 once proposals settle; directions in which the fitted ``q``
    is no narrower than ``r`` carry no information and are clipped (counted in
    ``status()["clipped_directions"]``).

    **Tempering.** ``sample_proposal`` draws from ``π · (q / r)^γ``: precision ``I + γΛ_L`` and
    information ``γ h_L`` of the learned likelihood, derived in
    :func:`~kestrel_torch.estimators._correction.gaussian_posterior`; ``log_prob`` is that distribution's
    exact density. Before the first epoch and while ``total_epochs < prior_epochs`` proposals
    are prior draws.

    **Fitting.** Gradient steps train the embedding and the MLP; at the end of every epoch the
    linear path ``W`` is solved in closed form (weighted ridge regression, when E ≤ 256) and
    Σ is refitted from the weighted residuals, both in float64 over the training set — a mean
    that is linear in the features then reaches least-squares precision in a few epochs,
    which stochastic gradients approach only slowly. Decoupled weight decay on the MLP's
    weight matrices (AdamW) keeps the MLP at zero where the linear path suffices, so its
    noise does not leak into the mean.

    Keyword args (besides those of :class:`StepwiseEstimator`; see
    :class:`~kestrel_torch.estimators._options.GaussianOptions`): ``hidden_dim=128``, ``num_layers=3``,
    ``momentum=0.01`` (running statistics), ``min_var=1e-20`` (variance floor in z-space),
    ``weight_decay=1.0`` (of the MLP's weights; 0 turns it off); ``lr`` defaults to 1e-2.

    Raises:
        TypeError: an unknown keyword argument (with a suggestion).
        ConfigError: a keyword argument out of range.
    """

    options_class: ClassVar[type[GaussianOptions]] = GaussianOptions
    options: GaussianOptions

    def make_head(self, dim: int, context_dim: int) -> GaussianHead:
        """The :class:`GaussianHead` for D = ``dim``, E = ``context_dim``."""
        o = self.options
        return GaussianHead(
            dim,
            context_dim,
            hidden_dim=o.hidden_dim,
            num_layers=o.num_layers,
            momentum=o.momentum,
            min_var=o.min_var,
            weight_decay=o.weight_decay,
        )
