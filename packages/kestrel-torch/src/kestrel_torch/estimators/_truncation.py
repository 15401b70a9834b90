"""Truncated proposals (TSNPE): the prior restricted to the posterior's highest-density region.

Deistler, Goncalves & Macke 2022, "Truncated proposals for scalable and hassle-free
simulation-based inference" (NeurIPS; arXiv:2210.04815). A round's proposal is the prior
p(θ) restricted to the region where the current posterior estimate q(θ | x_o) is at least a
threshold τ, τ the ``ε``-quantile of ``log q`` over draws from q itself — the region that holds
``1 − ε`` of q's mass (ε = 10⁻⁴ in the paper). Within that region the proposal is proportional to
the prior, so the posterior it implies is the true one restricted to the region: the estimator
trains with its plain maximum-likelihood loss on every row, no correction, no atoms, and no
leakage of mass outside the prior's support.

Draws: rejection from the prior (each candidate costs one evaluation of ``log q``, no
simulation). When the region is so small that rejection would need more than
``max_candidates`` prior draws for the ``n`` asked, the rest come by sampling-importance-
resampling (Rubin 1988): candidates from q, kept where ``log q ≥ τ``, resampled with weights
``p(θ) / q(θ | x_o)`` — draws of the truncated prior up to the resampling's approximation. Every
row records the **prior's** log density as its ``log_prob`` (the truncated prior is the prior
times a constant there), which is what marks it as a maximum-likelihood row for the loss.

Shape symbols: n draws, K candidates, F the latent node's parameters (θ-space).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kestrel_core import Record

__all__ = ["TruncationStats", "hpr_threshold", "sample_truncated"]

#: draws from q used to place the threshold τ
THRESHOLD_DRAWS = 10_000


@dataclass(frozen=True)
class TruncationStats:
    """What one truncated draw did.

    Attributes:
        threshold: τ, the ``log q`` threshold (θ-space).
        candidates: prior draws tried by rejection.
        accepted: of them, inside the region.
        resampled: draws that came by sampling-importance-resampling instead (0: rejection
            alone sufficed).
    """

    threshold: float
    candidates: int
    accepted: int
    resampled: int

    @property
    def acceptance(self) -> float:
        """The share of prior draws inside the region (an estimate of the region's prior
        mass; ``nan`` before any candidate)."""
        return self.accepted / self.candidates if self.candidates else float("nan")


def hpr_threshold(log_q: np.ndarray, epsilon: float) -> float:
    """τ: the ``epsilon``-quantile of ``log q`` at draws from q (float64 ``(K,)``), so the region
    ``{θ : log q(θ) ≥ τ}`` holds ``1 − epsilon`` of q's mass.

    Non-finite values (a draw outside the prior's support scores ``-inf``) count as below every
    finite one.

    Raises:
        ValueError: ``epsilon`` outside (0, 1), or no finite ``log q``.
    """
    if not 0.0 < float(epsilon) < 1.0:
        raise ValueError(f"truncation quantile: expected a number in (0, 1), got {epsilon!r}")
    log_q = np.asarray(log_q, dtype=np.float64).ravel()
    finite = log_q[np.isfinite(log_q)]
    if finite.size == 0:
        raise ValueError("truncation: every draw of the posterior has log q = -inf")
    values = np.where(np.isfinite(log_q), log_q, -np.inf)
    return float(np.quantile(values, float(epsilon), method="lower"))


def sample_truncated(
    n: int,
    prior_draws: Callable[[int], Record],
    log_prior: Callable[[np.ndarray], np.ndarray],
    posterior_draws: Callable[[int], Record],
    log_q: Callable[[np.ndarray], np.ndarray],
    threshold: float,
    rng: np.random.Generator,
    *,
    max_candidates: int,
    batch: int = 65_536,
) -> tuple[Record, TruncationStats]:
    """``n`` draws of the prior truncated to ``{θ : log q(θ) ≥ threshold}``.

    Args:
        n: draws wanted (≥ 0).
        prior_draws: ``k`` → ``{"value": float64 (k, F), "log_prob": float64 (k,)}`` prior draws.
        log_prior: θ ``(k, F)`` → the prior's log density float64 ``(k,)``.
        posterior_draws: ``k`` → draws from q (``log_prob``: q's θ-space density), for the
            resampling fallback.
        log_q: θ ``(k, F)`` → float64 ``(k,)``, q's θ-space log density (``-inf`` outside the
            prior's support).
        threshold: τ (:func:`hpr_threshold`).
        rng: the resampling's randomness (the prior's and q's draws bring their own).
        max_candidates: prior draws tried by rejection before the fallback (≥ 0).
        batch: the most prior draws of one rejection step (each step tries what the acceptance
            so far says the draws still missing need, with a margin; at least 256).

    Returns:
        ``({"value": float64 (n, F), "log_prob": float64 (n,)}, stats)`` — ``log_prob`` the
        prior's log density at each draw; the rejection draws first, in the order drawn.
    """
    values: list[np.ndarray] = []
    logps: list[np.ndarray] = []
    got = tried = inside_total = 0
    while got < n and tried < max_candidates:
        need = n - got
        # the first step tries twice what is needed; later ones what the acceptance so far
        # says is needed, with a margin (at most ``batch`` a step)
        rate = inside_total / tried if tried else 0.5
        k = int(np.ceil(1.2 * need / max(rate, 1.0 / (tried + 1))))
        k = min(max(k, need, 256), batch, max_candidates - tried)
        cand = prior_draws(k)
        inside = np.flatnonzero(log_q(cand["value"]) >= threshold)
        tried += k
        inside_total += len(inside)
        keep = inside[: n - got]
        values.append(cand["value"][keep])
        logps.append(cand["log_prob"][keep])
        got += len(keep)
    resampled = n - got
    if resampled > 0:
        record = _resample(resampled, log_prior, posterior_draws, threshold, rng)
        values.append(record["value"])
        logps.append(record["log_prob"])
    if values:
        value, log_prob = np.concatenate(values), np.concatenate(logps)
    else:
        empty = prior_draws(0)
        value, log_prob = empty["value"], empty["log_prob"]
    stats = TruncationStats(float(threshold), tried, inside_total, resampled)
    return {"value": value, "log_prob": log_prob}, stats


#: candidates from q per draw the resampling returns
_RESAMPLE_FACTOR = 16


def _resample(
    n: int,
    log_prior: Callable[[np.ndarray], np.ndarray],
    posterior_draws: Callable[[int], Record],
    threshold: float,
    rng: np.random.Generator,
) -> Record:
    """``n`` draws of the truncated prior by sampling-importance-resampling from q: candidates
    inside the region, weighted by ``p(θ) / q(θ)``, drawn with replacement."""
    cand = posterior_draws(max(_RESAMPLE_FACTOR * n, 1024))
    log_p = np.asarray(log_prior(cand["value"]), dtype=np.float64)
    log_w = log_p - cand["log_prob"]
    ok = (cand["log_prob"] >= threshold) & np.isfinite(log_w)
    if not ok.any():  # none of q's own draws scores τ: q's draws inside the support
        ok = np.isfinite(log_p)
        log_w = np.zeros_like(log_p)
    index = np.flatnonzero(ok)
    if index.size == 0:
        raise ValueError(
            "truncation: every draw of the posterior lies outside the prior's support; "
            "the posterior estimate is not usable as a proposal"
        )
    w = np.exp(log_w[index] - log_w[index].max())
    pick = index[rng.choice(len(index), size=n, replace=True, p=w / w.sum())]
    return {"value": cand["value"][pick], "log_prob": log_p[pick]}
