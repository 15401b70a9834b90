"""Estimator options: one frozen dataclass per estimator, validated once, at construction.

An estimator is built from its config section as ``cls(**kwargs)``; the keyword arguments go
straight into :meth:`EstimatorOptions.from_kwargs`, which refuses an unknown one (with a
spelling suggestion) and checks and normalises every value in ``__post_init__``. Constructing
an estimator does nothing else — no model, device or data — so the driver's preflight builds
each configured estimator once to report a bad option before any actor starts, through exactly
this validation.

Each field carries its rule in its metadata (see :func:`option`); a subclass that changes a
default (``lr``) restates the rule with it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field, fields
from typing import Any, TypeVar

import torch

from kestrel_core.internal import unknown
from kestrel_torch._errors import ConfigError

__all__ = ["EstimatorOptions", "GaussianOptions", "FlowOptions", "LikelihoodOptions", "option"]

_O = TypeVar("_O", bound="EstimatorOptions")

#: a rule: ``(owner, key, value, options) -> normalised value``; raises ConfigError
Check = Callable[[str, str, Any, Any], Any]


def option(default: Any, check: Check | None = None) -> Any:
    """A dataclass field with its ``default`` and the rule that validates it."""
    return field(default=default, metadata={"check": check})


def integer(minimum: int) -> Check:
    """Rule: an integer (not a bool) ≥ ``minimum``, normalised to ``int``."""

    def check(owner: str, key: str, value: Any, _: Any) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or int(value) < minimum
        ):
            raise ConfigError(f"{owner}({key}={value!r}): expected an integer >= {minimum}")
        return int(value)

    return check


def real(
    low: float, high: float | str = math.inf, *, low_open: bool = False, allow_inf: bool = False
) -> Check:
    """Rule: a real number (not a bool, not NaN) in ``[low, high]`` (``(low, high]`` when
    ``low_open``), finite unless ``allow_inf``; ``high`` may name an earlier field. → ``float``."""

    def check(owner: str, key: str, value: Any, options: Any) -> float:
        top = float(getattr(options, high)) if isinstance(high, str) else high
        ok = (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and not math.isnan(value)
        )
        ok = ok and (allow_inf or math.isfinite(value))
        ok = ok and (low < value if low_open else low <= value) and value <= top
        if not ok:
            bounds = f"{'(' if low_open else '['}{low}, {top}]"
            raise ConfigError(f"{owner}({key}={value!r}): expected a number in {bounds}")
        return float(value)

    return check


def flag(owner: str, key: str, value: Any, _: Any) -> bool:
    """Rule: ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ConfigError(f"{owner}({key}={value!r}): expected true or false")
    return value


def device_name(owner: str, key: str, value: Any, _: Any) -> str | torch.device:
    """Rule: a device name or ``torch.device``; whether it exists is checked at ``setup``."""
    if not isinstance(value, (str, torch.device)):
        raise ConfigError(f"{owner}({key}={value!r}): expected 'cpu', 'cuda', 'cuda:N' or 'auto'")
    return value


def optional_seed(owner: str, key: str, value: Any, options: Any) -> int | None:
    """Rule: ``None`` or an integer ≥ 0."""
    return None if value is None else integer(0)(owner, key, value, options)


#: the values of the ``proposal`` option
PROPOSAL_KINDS = ("tempered", "truncated")


def proposal_kind(owner: str, key: str, value: Any, _: Any) -> str:
    """Rule: one of :data:`PROPOSAL_KINDS`."""
    if value not in PROPOSAL_KINDS:
        raise ConfigError(
            f"{owner}({key}={value!r}): expected one of {', '.join(map(repr, PROPOSAL_KINDS))}"
        )
    return str(value)


def widths(owner: str, key: str, value: Any, _: Any) -> tuple[int, ...]:
    """Rule: a non-empty sequence of positive integers, normalised to a tuple."""
    ok = not isinstance(value, (str, bytes)) and isinstance(value, Sequence) and bool(value)
    ok = ok and all(
        isinstance(h, numbers.Integral) and not isinstance(h, bool) and int(h) >= 1 for h in value
    )
    if not ok:
        raise ConfigError(
            f"{owner}({key}={value!r}): expected a non-empty list of positive integers"
        )
    return tuple(int(h) for h in value)


@dataclass(frozen=True, kw_only=True)
class EstimatorOptions:
    """The keyword arguments every estimator takes, checked and normalised.

    Attributes:
        max_epochs: epochs over the estimator's life (≥ 0): a loaded checkpoint's epochs count,
            so a resumed run trains up to this total. In a launch with ``budget.simulations``
            (and ``budget.stop_early: false``) training goes on past it while the budget's
            rounds still come, until every budgeted simulation was in an epoch; 0 trains
            nothing. batch_size: rows per step (≥ 1).
        lr: AdamW learning rate (> 0).
        clip_max_norm: the gradients' total 2-norm is clipped to this before every step
            (≥ 0; 0, the default, is off; sbi's training loop clips at 5). A batch whose rows
            carry extreme importance weights or residuals then cannot fill Adam's second moment
            for the following steps (example 05 sets 5: without it 2 of 7 launches kept an
            epoch-16 model 0.36 σ off). Off by default: on two moons it made training twice as
            long (371 s against 180 s, C2ST 0.51 against 0.54).
        early_stop_patience: epochs without a better validation loss before stopping (≥ 1).
        lr_decay_factor: ReduceLROnPlateau factor on the validation loss, in (0, 1]; 1 is off.
        lr_patience: its patience in epochs (≥ 0). min_lr: its floor, in [0, lr].
        prior_epochs: proposals stay prior draws until this many epochs were trained over the
            estimator's life.
        gamma: tempering exponent of proposals (≥ 0; 0: always the prior).
        proposal: how resimulation rounds draw: ``"tempered"`` (the default: the best model's
            posterior raised to ``gamma``, with the estimator's proposal correction) or
            ``"truncated"`` (TSNPE, Deistler et al. 2022: the prior restricted to the best
            model's ``1 − truncation`` highest-density region at the observation, no correction;
            :mod:`~kestrel_torch.estimators._truncation`). ``gamma`` does not apply to
            truncated proposals (setting both is refused), nor do ``amortized: true`` and
            ``ensemble`` > 1.
        truncation: ε of truncated proposals: the region holds ``1 − ε`` of the posterior
            estimate's mass, in (0, 0.5] (the paper's 1e-4, the default).
        amortized: an estimator meant for many observations: proposals off (``gamma`` = 0, the
            prior the only source of training samples), so its posterior holds wherever the
            prior predictive reaches; ``false`` (the default) focuses training on the run's
            observation with γ-tempered proposals, and sampling such a run at another
            observation warns. Setting both ``amortized: true`` and a ``gamma`` > 0 is refused.
        validation_fraction: in [0, 0.5]: ``0`` (the default) validates on the store's
            VALIDATION rows (the newest ``buffer.validation_samples``: in a sequential run,
            rows of the latest proposal); above 0 about this share of every append's rows
            validates, chosen by a fixed rule on the row's id and the seed
            (:func:`~kestrel_torch.data._split.validation_mask`), never re-split: every model
            is compared on the union of every round's slice, so the best model is not judged on
            its own proposal's rows alone.
        cache_sync_every: sync the loader caches every this many epochs (≥ 1).
        max_cache_samples: cache at most this many training samples (0: all).
        discard_samples, log_ratio_threshold: mark a training sample DISFAVOURED when
            ``log q(θ_i | x_i) − log_prob_i`` falls below the threshold.
        embedding: the embedding's config mapping or module (``None``: identity); built at setup.
        device: "cpu", "cuda", "cuda:N" or "auto" (CUDA when available); resolved at setup.
        seed: the estimator's seed (``None``: the context's).
        ensemble: members of an ensemble (≥ 1; 1, the default, is one estimator). With K > 1
            a launch trains K copies of this estimator at once, each in its own actor with the
            node's resources (``graph.<node>.ray``), from the same buffer, each with its own
            seed (derived from ``seed`` and the member's index); the node's posterior is their
            mixture weighted by validation log-probability
            (:class:`~kestrel_torch.EnsemblePosterior`). The estimator itself ignores it.

    Raises:
        ConfigError: a value out of range; the message names the estimator and the keyword.
    """

    max_epochs: int = option(100, integer(0))
    batch_size: int = option(128, integer(1))
    lr: float = option(1e-3, real(0.0, low_open=True))
    clip_max_norm: float = option(0.0, real(0.0))
    early_stop_patience: int = option(16, integer(1))
    lr_decay_factor: float = option(1.0, real(0.0, 1.0, low_open=True))
    lr_patience: int = option(8, integer(0))
    min_lr: float = option(0.0, real(0.0, "lr"))
    prior_epochs: int = option(0, integer(0))
    gamma: float = option(0.5, real(0.0))
    amortized: bool = option(False, flag)
    proposal: str = option("tempered", proposal_kind)
    truncation: float = option(1e-4, real(0.0, 0.5, low_open=True))
    validation_fraction: float = option(0.0, real(0.0, 0.5))
    cache_sync_every: int = option(1, integer(1))
    max_cache_samples: int = option(0, integer(0))
    discard_samples: bool = option(False, flag)
    log_ratio_threshold: float = option(-20.0, real(-math.inf, allow_inf=True))
    embedding: Any = option(None)
    device: Any = option("cpu", device_name)
    seed: int | None = option(None, optional_seed)
    ensemble: int = option(1, integer(1))
    #: the estimator's class name, used in messages (not stored)
    owner: InitVar[str | None] = None

    def __post_init__(self, owner: str | None) -> None:
        name = owner or type(self).__name__
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, check(name, f.name, getattr(self, f.name), self))
        if self.amortized:
            object.__setattr__(self, "gamma", 0.0)  # proposals off: prior draws only

    @classmethod
    def from_kwargs(cls: type[_O], kwargs: Mapping[str, Any], owner: str) -> _O:
        """Options from an estimator's keyword arguments.

        Args:
            kwargs: keyword → value; unset keywords take the class's defaults.
            owner: the estimator's class name, for messages.

        Raises:
            TypeError: an unknown keyword (``"GaussianPosterior: unknown keyword argument
                'max_epoch' (did you mean 'max_epochs'?)"``).
            ConfigError: a value out of range, or ``amortized: true`` with a ``gamma`` > 0.
        """
        names = [f.name for f in fields(cls)]
        for key in kwargs:
            if key not in names:
                raise TypeError(f"{owner}: {unknown('keyword argument', key, names)}")
        if kwargs.get("proposal") == "truncated":
            clash = [k for k in ("gamma",) if k in kwargs]
            clash += ["amortized"] if kwargs.get("amortized") is True else []
            if kwargs.get("ensemble", 1) != 1:
                raise ConfigError(
                    f"{owner}(proposal='truncated', ensemble={kwargs['ensemble']!r}): an "
                    "ensemble's truncated proposal would need the mixture's own region (each "
                    "member's region drawn alone is not the prior restricted to one region); "
                    "use proposal: tempered with an ensemble, or ensemble: 1"
                )
            if clash:
                given = ", ".join(f"{k}={kwargs[k]!r}" for k in clash)
                raise ConfigError(
                    f"{owner}(proposal='truncated', {given}): truncated proposals are the prior "
                    "restricted to the posterior's highest-density region, neither tempered "
                    f"(gamma) nor off (amortized); drop {' and '.join(clash)}"
                )
        if kwargs.get("amortized") is True and kwargs.get("gamma", 0) != 0:
            raise ConfigError(
                f"{owner}(amortized=True, gamma={kwargs['gamma']!r}): an amortized estimator "
                "draws no proposals (γ = 0, prior draws only); drop gamma or set amortized: false"
            )
        return cls(**kwargs, owner=owner)

    def as_dict(self) -> dict[str, Any]:
        """Every option by name (values as stored: no copies)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, kw_only=True)
class GaussianOptions(EstimatorOptions):
    """Options of :class:`~kestrel_torch.GaussianPosterior`: the common ones with ``lr`` 1e-2, and

    Attributes:
        hidden_dim, num_layers: the MLP of the mean (≥ 1 each).
        momentum: weight of a training batch in the running statistics, in (0, 1].
        min_var: variance floor in z-space (≥ 0).
        weight_decay: decoupled weight decay of the MLP's weight matrices (≥ 0; 0 is off).
    """

    lr: float = option(1e-2, real(0.0, low_open=True))
    hidden_dim: int = option(128, integer(1))
    num_layers: int = option(3, integer(1))
    momentum: float = option(0.01, real(0.0, 1.0, low_open=True))
    min_var: float = option(1e-20, real(0.0))
    weight_decay: float = option(1.0, real(0.0))


@dataclass(frozen=True, kw_only=True)
class FlowOptions(EstimatorOptions):
    """Options of :class:`~kestrel_torch.FlowPosterior`: the common ones, and

    Attributes:
        transforms: spline layers (≥ 1). hidden_features: widths of their hidden layers.
        bins: spline bins (≥ 1). num_atoms: atoms per row of the APT loss (≥ 2).
        momentum: weight of a training batch in the running statistics, in (0, 1].
    """

    transforms: int = option(3, integer(1))
    hidden_features: tuple[int, ...] = option((64, 64), widths)
    bins: int = option(8, integer(1))
    num_atoms: int = option(10, integer(2))
    momentum: float = option(0.01, real(0.0, 1.0, low_open=True))


def _no_discards(owner: str, key: str, value: Any, options: Any) -> bool:
    if flag(owner, key, value, options):
        raise ConfigError(
            f"{owner}({key}={value!r}): a likelihood estimator has no posterior density of the "
            "training rows to discard them by; drop discard_samples"
        )
    return False


def _tempered_only(owner: str, key: str, value: Any, options: Any) -> str:
    if proposal_kind(owner, key, value, options) != "tempered":
        raise ConfigError(
            f"{owner}({key}={value!r}): a likelihood estimator's proposals are tempered MCMC "
            "draws; truncated proposals are for the posterior estimators (FlowPosterior, "
            "FlowMatchingPosterior, GaussianPosterior); drop proposal"
        )
    return "tempered"


@dataclass(frozen=True, kw_only=True)
class LikelihoodOptions(EstimatorOptions):
    """Options of :class:`~kestrel_torch.FlowLikelihood`: the common ones (``discard_samples``
    refused), and

    Attributes:
        transforms: spline layers (≥ 1). hidden_features: widths of their hidden layers.
        bins: spline bins (≥ 1). momentum: weight of a training batch in the running
        statistics, in (0, 1]. proposal: ``"tempered"`` only. mcmc_steps: Metropolis steps
        of a posterior draw (≥ 0;
        :mod:`~kestrel_torch.estimators._mcmc`). proposal_steps: Metropolis steps of a proposal draw
        (γ < 1; ≥ 0): a likelihood's training rows need proposals that cover the posterior,
        not exact ones, and proposals are drawn every round.
    """

    transforms: int = option(3, integer(1))
    hidden_features: tuple[int, ...] = option((64, 64), widths)
    bins: int = option(8, integer(1))
    momentum: float = option(0.01, real(0.0, 1.0, low_open=True))
    mcmc_steps: int = option(50, integer(0))
    proposal_steps: int = option(10, integer(0))
    discard_samples: bool = option(False, _no_discards)
    proposal: str = option("tempered", _tempered_only)
