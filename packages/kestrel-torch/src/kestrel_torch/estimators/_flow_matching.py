"""Flow matching posterior estimation (FMPE): a continuous normalising flow whose vector field
is trained by conditional flow matching, sampled and scored by integrating an ODE.

Shape symbols: B rows of a batch, N samples, M rows of conditions, E embedding width,
D free parameters, H hidden width.

References:
    J. Wildberger, M. Dax, S. Buchholz, S. Green, J. Macke, B. Schölkopf (2023), "Flow Matching
    for Scalable Simulation-Based Inference", NeurIPS, arXiv:2305.17161.
    Y. Lipman, R. Chen, H. Ben-Hamu, M. Nickel, M. Le (2023), "Flow Matching for Generative
    Modeling", ICLR, arXiv:2210.02747.
    W. Grathwohl, R. Chen, J. Bettencourt, I. Sutskever, D. Duvenaud (2019), "FFJORD",
    ICLR, arXiv:1810.01367 (the density by the instantaneous change of variables, Hutchinson's
    trace estimator).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torchdiffeq
from torch import nn

from kestrel_torch._errors import ConfigError, EstimatorError
from kestrel_torch.estimators._options import EstimatorOptions, integer, option, real, widths
from kestrel_torch.estimators._stepwise import StepwiseEstimator
from kestrel_torch.nets._head import PosteriorHead, RowLoss
from kestrel_torch.nets._moments import RunningMoments

__all__ = ["FlowMatchingPosterior", "FlowMatchingHead", "FlowMatchingOptions", "VectorField"]

_LOG_2PI = math.log(2.0 * math.pi)
_ROWS_PER_PASS = 1 << 14  # rows per ODE solve while sampling or scoring
_VALIDATION_SEED = 0x5EED  # times and noise of the validation loss: the same for every model
_PROBE_SEED = 0x7EACE  # Hutchinson probes of log_prob: deterministic
_EXACT_MAX_DIM = 10  # exact divergence (D backward passes) up to this D, Hutchinson above
_FIXED = ("rk4", "midpoint", "euler")
_ADAPTIVE = ("dopri5", "dopri8", "bosh3", "adaptive_heun")
_FREQUENCIES = 8  # Fourier features of t


def _no_gamma(owner: str, key: str, value: Any, options: Any) -> float:
    value = real(0.0)(owner, key, value, options)
    if value != 0.0:
        raise ConfigError(
            f"{owner}({key}={value!r}): flow matching trains on the buffer's rows without a "
            "proposal correction, so it draws no tempered proposals; drop gamma (amortised "
            "training), or set proposal: truncated for sequential rounds"
        )
    return value


def _no_discards(owner: str, key: str, value: Any, options: Any) -> bool:
    if value is not False:
        raise ConfigError(
            f"{owner}({key}={value!r}): flow matching has no per-row density of the training "
            "rows to discard them by (its loss is a regression); drop discard_samples"
        )
    return False


def _method(owner: str, key: str, value: Any, _: Any) -> str:
    if value not in _FIXED + _ADAPTIVE:
        raise ConfigError(
            f"{owner}({key}={value!r}): expected one of {', '.join(_FIXED + _ADAPTIVE)} "
            "(torchdiffeq's solvers; fixed-step ones use ode_steps, adaptive ones ode_tol)"
        )
    return str(value)


@dataclass(frozen=True, kw_only=True)
class FlowMatchingOptions(EstimatorOptions):
    """Options of :class:`~kestrel_torch.FlowMatchingPosterior`: the common ones (``gamma`` 0 and
    refused above it, ``discard_samples`` refused, ``lr`` 5e-4), and

    Attributes:
        hidden_features: widths of the vector field's residual blocks (every width is one
            block; consecutive blocks of different width are joined by a linear map).
        sigma_min: σ_min of the Gaussian probability path, in (0, 1).
        time_prior_exponent: α of the time prior ``p(t) ∝ t^{1/(1+α)}`` on [0, 1] (≥ 0).
        ode_method: torchdiffeq solver: fixed-step ``rk4`` (default), ``midpoint``, ``euler``,
            or adaptive ``dopri5``, ``dopri8``, ``bosh3``, ``adaptive_heun``.
        ode_steps: steps of a fixed-step solver over [0, 1] (≥ 1).
        ode_tol: rtol = atol of an adaptive solver (> 0).
        momentum: weight of a training batch in the running statistics, in (0, 1].
    """

    lr: float = option(5e-4, real(0.0, low_open=True))
    gamma: float = option(0.0, _no_gamma)
    discard_samples: bool = option(False, _no_discards)
    hidden_features: tuple[int, ...] = option((64, 64, 64), widths)
    sigma_min: float = option(1e-4, real(0.0, 1.0, low_open=True))
    time_prior_exponent: float = option(0.0, real(0.0))
    ode_method: str = option("rk4", _method)
    ode_steps: int = option(32, integer(1))
    ode_tol: float = option(1e-5, real(0.0, low_open=True))
    momentum: float = option(0.01, real(0.0, 1.0, low_open=True))

    def __post_init__(self, owner: str | None) -> None:
        super().__post_init__(owner)
        if self.sigma_min >= 1.0:
            raise ConfigError(
                f"{owner or type(self).__name__}(sigma_min={self.sigma_min!r}): expected a "
                "number in (0, 1)"
            )


class _Block(nn.Module):
    """A residual block ``h + W₂ SiLU(W₁ SiLU(h)) ⊙ σ(G c)``, gated by the condition ``c``
    (the gated linear units of the FMPE paper's conditioning on ``(t, x)``)."""

    def __init__(self, width: int, cond: int) -> None:
        super().__init__()
        self.inner = nn.Linear(width, width)
        self.outer = nn.Linear(width, width)
        self.gate = nn.Linear(cond, width)

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        act = nn.functional.silu
        return h + self.outer(act(self.inner(act(h)))) * torch.sigmoid(self.gate(c))


class VectorField(nn.Module):
    """``v(w_t, t, ŝ)``: a residual network over ``[w_t, t, ŝ]``, each block gated by
    ``[Fourier features of t, ŝ]``.

    Args:
        dim: D. context_dim: E. hidden_features: the blocks' widths.
    """

    frequencies: torch.Tensor

    def __init__(self, dim: int, context_dim: int, hidden_features: Sequence[int]) -> None:
        super().__init__()
        cond = 1 + 2 * _FREQUENCIES + context_dim
        widths_ = list(hidden_features)
        self.register_buffer(
            "frequencies", math.pi * 2.0 ** torch.arange(_FREQUENCIES, dtype=torch.float32)
        )
        self.input = nn.Linear(dim + cond, widths_[0])
        self.blocks = nn.ModuleList(_Block(w, cond) for w in widths_)
        self.joins = nn.ModuleList(
            nn.Identity() if a == b else nn.Linear(a, b) for a, b in zip(widths_, widths_[1:])
        )
        self.output = nn.Linear(widths_[-1], dim)

    def forward(self, w: torch.Tensor, t: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """``w`` ``(B, D)``, ``t`` ``(B,)``, ``ctx`` ``(B, E)`` → ``(B, D)``, all one dtype."""
        angles = t[:, None] * self.frequencies.to(t.dtype)
        c = torch.cat([t[:, None], torch.sin(angles), torch.cos(angles), ctx], dim=1)
        h = self.input(torch.cat([w, c], dim=1))
        for i, block in enumerate(self.blocks):
            h = block(h, c)
            if i < len(self.joins):
                h = self.joins[i](h)
        return self.output(nn.functional.silu(h))


class FlowMatchingHead(PosteriorHead):
    """The FMPE head: a vector field over the standardised prior space, trained by conditional
    flow matching.

    The field models ``w = (z − m) / σ`` in float32, with ``m``, ``σ`` the running float64 mean
    and standard deviations of the buffer's z (as :class:`~kestrel_torch.estimators._flow.FlowHead`);
    densities are returned in z-space, float64. The context is the embedding whitened by running
    float64 statistics.

    Args:
        dim: D. context_dim: E. hidden_features, sigma_min, time_prior_exponent, ode_method,
        ode_steps, ode_tol, momentum: see :class:`FlowMatchingOptions`.
    """

    def __init__(
        self,
        dim: int,
        context_dim: int,
        *,
        hidden_features: Sequence[int],
        sigma_min: float,
        time_prior_exponent: float,
        ode_method: str,
        ode_steps: int,
        ode_tol: float,
        momentum: float,
    ) -> None:
        super().__init__()
        self.dim = int(dim)
        self.sigma_min = float(sigma_min)
        self.alpha = float(time_prior_exponent)
        self.ode_method, self.ode_steps, self.ode_tol = ode_method, int(ode_steps), float(ode_tol)
        self.context_stats = RunningMoments(context_dim, momentum)
        self.latent_stats = RunningMoments(dim, momentum, full=True, min_var=1e-30)
        self.field = VectorField(dim, context_dim, hidden_features)

    def context(self, s: torch.Tensor) -> torch.Tensor:
        """The field's context: whitened embedding, float32 ``(M, E)``."""
        return self.context_stats.normalize(s).to(torch.float32)

    def _log_scale(self) -> torch.Tensor:
        return torch.log(self.latent_stats.std).sum()

    def sample_times(self, b: int, generator: torch.Generator | None, device: Any) -> torch.Tensor:
        """``b`` times from ``p(t) ∝ t^{1/(1+α)}`` on [0, 1] by inversion: float32 ``(b,)``."""
        u = torch.rand(b, generator=generator, device=device, dtype=torch.float32)
        return u ** ((1.0 + self.alpha) / (2.0 + self.alpha))

    # -- the head interface ------------------------------------------------------------------
    def loss(
        self,
        z: torch.Tensor,
        s: torch.Tensor,
        log_prob: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> RowLoss:
        """The conditional flow-matching loss of each row,
        ``‖v(ψ_t(w₀), t, ŝ) − (w − (1 − σ_min) w₀)‖²`` with ``w₀ ~ N(0, I)``, ``t ~ p(t)`` and
        ``ψ_t(w₀) = (1 − (1 − σ_min) t) w₀ + t w``; ``log_prob`` is not used (no proposal
        correction). In eval mode ``t`` and ``w₀`` come from a fixed seed, so every model
        compared on a validation set is scored on the same draws. ``log_q`` is NaN: the loss
        computes no density (``discard_samples`` is refused for this head).
        """
        self.context_stats.update(s)
        self.latent_stats.update(z)
        if not self.training:
            generator = torch.Generator(z.device).manual_seed(_VALIDATION_SEED)
        w = self.latent_stats.normalize(z).to(torch.float32)
        b = w.shape[0]
        t = self.sample_times(b, generator, w.device)
        w0 = torch.randn(b, self.dim, generator=generator, device=w.device, dtype=w.dtype)
        shrink = 1.0 - (1.0 - self.sigma_min) * t[:, None]
        target = w - (1.0 - self.sigma_min) * w0
        v = self.field(shrink * w0 + t[:, None] * w, t, self.context(s))
        loss = ((v - target) ** 2).sum(-1).to(torch.float64)
        return RowLoss(loss, None, torch.full_like(loss, math.nan))

    def _dynamics(
        self, ctx: torch.Tensor, probe: torch.Tensor | None
    ) -> Callable[[torch.Tensor, tuple[torch.Tensor, torch.Tensor]], tuple[torch.Tensor, ...]]:
        """The augmented ODE ``d(w, a)/dt = (v, div v)``: the divergence exact (``probe`` None)
        or Hutchinson's ``εᵀ (∂v/∂w) ε`` for the fixed probe ``ε`` ``(B, D)``."""

        def f(
            t: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
        ) -> tuple[torch.Tensor, ...]:
            w = state[0].detach()
            with torch.enable_grad():
                w.requires_grad_(True)
                tt = t.to(w.dtype).expand(w.shape[0])
                v = self.field(w, tt, ctx)
                if probe is None:
                    div = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device)
                    for i in range(self.dim):
                        (g,) = torch.autograd.grad(v[:, i].sum(), w, retain_graph=i < self.dim - 1)
                        div = div + g[:, i]
                else:
                    (g,) = torch.autograd.grad((v * probe).sum(), w)
                    div = (g * probe).sum(-1)
            return v.detach(), div.detach()

        return f

    def _solve(
        self,
        w: torch.Tensor,
        ctx: torch.Tensor,
        start: float,
        end: float,
        probe: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Integrate ``(w, a)`` from ``start`` to ``end`` (``a(start) = 0``); → ``(w, a)`` at end."""
        times = torch.tensor([start, end], dtype=w.dtype, device=w.device)
        a0 = torch.zeros(w.shape[0], dtype=w.dtype, device=w.device)
        if self.ode_method in _FIXED:
            kwargs: dict[str, Any] = {"options": {"step_size": 1.0 / self.ode_steps}}
        else:
            kwargs = {"rtol": self.ode_tol, "atol": self.ode_tol}
        ws, acc = torchdiffeq.odeint(
            self._dynamics(ctx, probe), (w, a0), times, method=self.ode_method, **kwargs
        )
        return ws[-1], acc[-1]

    def _probe(self, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor | None:
        if self.dim <= _EXACT_MAX_DIM:
            return None
        signs = torch.randint(0, 2, like.shape, generator=generator, device=like.device)
        return (2 * signs - 1).to(like.dtype)  # Rademacher

    def sample(
        self, s: torch.Tensor, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` posterior draws: base draws ``w₀ ~ N(0, I)`` integrated from t = 0 to 1, with
        their z-space log density ``log N(w₀) − ∫₀¹ div v dt − Σ log σ`` (exact divergence for
        D ≤ 10, Hutchinson's estimate above). ``gamma`` must be 1 (no tempering).

        Raises:
            EstimatorError: ``gamma`` ≠ 1.
        """
        if gamma != 1.0:
            raise EstimatorError(
                f"FlowMatchingPosterior draws no tempered proposals (gamma={gamma!r})"
            )
        ctx = self.context(s)
        ctx = ctx.expand(n, ctx.shape[1]) if ctx.shape[0] == 1 else ctx
        zs, log_qs = [], []
        for start in range(0, n, _ROWS_PER_PASS):
            rows = min(_ROWS_PER_PASS, n - start)
            c = ctx[start : start + rows]
            w0 = torch.randn(rows, self.dim, generator=generator, device=c.device, dtype=c.dtype)
            w1, acc = self._solve(w0, c, 0.0, 1.0, self._probe(w0, generator))
            sq = (w0.to(torch.float64) ** 2).sum(-1)
            log_q = -0.5 * sq - 0.5 * self.dim * _LOG_2PI - acc.to(torch.float64)
            zs.append(self.latent_stats.mean + self.latent_stats.std * w1.to(torch.float64))
            log_qs.append(log_q - self._log_scale())
        return torch.cat(zs), torch.cat(log_qs)

    def log_prob(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """``log q(z | s)`` in z-space through the probability-flow ODE, integrated from t = 1
        back to 0; deterministic (Hutchinson's probes, for D > 10, from a fixed seed)."""
        ctx = self.context(s)
        ctx = ctx.expand(z.shape[0], ctx.shape[1]) if ctx.shape[0] == 1 else ctx
        generator = torch.Generator(z.device).manual_seed(_PROBE_SEED)
        out = []
        for start in range(0, z.shape[0], _ROWS_PER_PASS):
            zz = z[start : start + _ROWS_PER_PASS]
            w1 = self.latent_stats.normalize(zz).to(torch.float32)
            c = ctx[start : start + _ROWS_PER_PASS]
            w0, acc = self._solve(w1, c, 1.0, 0.0, self._probe(w1, generator))
            sq = (w0.to(torch.float64) ** 2).sum(-1)
            # a(0) = ∫₁⁰ div v dt = −∫₀¹ div v dt
            out.append(-0.5 * sq - 0.5 * self.dim * _LOG_2PI + acc.to(torch.float64))
        return torch.cat(out) - self._log_scale()


class FlowMatchingPosterior(StepwiseEstimator):
    """Flow matching posterior estimation (FMPE; Wildberger, Dax et al. 2023, arXiv:2305.17161).

    **Space.** As :class:`~kestrel_torch.FlowPosterior`: θ is mapped to ``z = prior.to_normal(θ)``,
    where the prior is ``N(0, I)``, and standardised by the buffer's running float64 moments,
    ``w = (z − m)/σ``; draws map back through ``prior.from_normal``, so they never leave the
    prior's support, and densities are reported in θ-space (the Jacobians of both maps added).
    ``log_prob`` is ``-inf`` in each row where the prior's density is zero (outside its support,
    NaN, ±inf).

    **Model.** A vector field ``v(w_t, t, x)`` (:class:`VectorField`: residual blocks gated by
    Fourier features of t and the whitened embedding of x — any ``embedding`` the other
    estimators accept) defines a continuous normalising flow from the base ``N(0, I)`` at t = 0
    to the posterior at t = 1.

    **Loss.** Conditional flow matching with the Gaussian probability path of the paper:
    ``w_t = (1 − (1 − σ_min) t) w₀ + t w``, ``w₀ ~ N(0, I)``, target field
    ``w − (1 − σ_min) w₀``, the squared error summed over D and averaged over rows, with
    ``t ~ p(t) ∝ t^{1/(1+α)}`` on [0, 1] (α = ``time_prior_exponent``; 0 by default, p(t) ∝ t,
    more weight near the data end). Validation draws t and w₀ from a fixed seed.

    **Sampling** integrates the field from base draws at t = 0 to t = 1 with torchdiffeq
    (``ode_method``: fixed-step ``rk4`` with ``ode_steps`` steps by default, deterministic and
    row-independent; adaptive solvers take ``ode_tol``); each draw's density is integrated along
    (below). **log_prob** integrates the probability-flow ODE from t = 1 back to 0 with the
    instantaneous change of variables, ``log q(w₁) = log N(w₀) − ∫₀¹ ∇·v dt``: the divergence
    is exact (D backward passes) for D ≤ 10 and Hutchinson's unbiased estimate (one Rademacher
    probe per row, fixed along the path; a fixed seed in ``log_prob``, so it is deterministic)
    above — an unbiased estimate of the log density's integrand, so for D > 10 densities carry
    noise. Each ODE solve takes at most 16 384 rows; with an adaptive solver the rows of a solve
    share its steps.

    **Proposals.** None: under a proposal other than the prior the flow-matching loss targets
    the *proposal* posterior (∝ proposal × likelihood), and this estimator applies no
    correction, so ``gamma`` defaults to 0 (proposals are prior draws: amortised training on
    the buffer's rows) and a ``gamma`` > 0 is refused with a ConfigError; for sequential rounds
    use :class:`~kestrel_torch.FlowPosterior`. A buffer holding rows from other proposals (one
    kept from another estimator's run) is trained on as it is, and then yields that mixture's
    posterior. ``discard_samples`` is refused (no per-row density in the loss).

    **Dtypes and devices.** The field runs in float32 on ``device``; the standardisation,
    draws and densities are float64, so posteriors much narrower than the prior keep their
    precision (as the FlowPosterior's). Sampling and ``log_prob`` return numpy float64.

    Keyword args (besides those of :class:`StepwiseEstimator`; see
    :class:`FlowMatchingOptions`): ``hidden_features=(64, 64, 64)``, ``sigma_min=1e-4``,
    ``time_prior_exponent=0``, ``ode_method="rk4"``, ``ode_steps=32``, ``ode_tol=1e-5``,
    ``momentum=0.01``; ``lr`` defaults to 5e-4, ``gamma`` to 0.

    Raises:
        TypeError: an unknown keyword argument (with a suggestion).
        ConfigError: a keyword argument out of range, ``gamma`` > 0, ``discard_samples: true``,
            an unknown ``ode_method``.
    """

    options_class: ClassVar[type[FlowMatchingOptions]] = FlowMatchingOptions
    options: FlowMatchingOptions
    #: no proposal correction: rows reused from another run's proposals would bias it
    #: (``kestrel launch --reuse`` gives it the prior's rows only)
    proposal_rows: ClassVar[bool] = False

    def make_head(self, dim: int, context_dim: int) -> FlowMatchingHead:
        """The :class:`FlowMatchingHead` for D = ``dim``, E = ``context_dim``."""
        o = self.options
        return FlowMatchingHead(
            dim,
            context_dim,
            hidden_features=o.hidden_features,
            sigma_min=o.sigma_min,
            time_prior_exponent=o.time_prior_exponent,
            ode_method=o.ode_method,
            ode_steps=o.ode_steps,
            ode_tol=o.ode_tol,
            momentum=o.momentum,
        )
