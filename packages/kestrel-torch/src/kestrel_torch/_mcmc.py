"""Population MCMC for densities known up to a constant: sampling-importance-resampling from the
prior to start, then differential-evolution Metropolis moves.

Shape symbols: C chains, K candidates, D dimensions, G groups (chains that share a target).

Used by :class:`~kestrel_torch.FlowLikelihood`, whose posterior ∝ prior × learned likelihood
has no sampler of its own. Chains come in **groups**: every chain of a group targets the same
density (the posterior of one observation), and its moves are built from the states of other
chains of the same group only. In z-space (the prior's standard-normal space) the prior is
``N(0, I)``, so the start is plain: ``K`` prior draws per group, weighted by the target over the
prior, resampled with replacement onto the group's chains.

**Moves** (ter Braak 2006, "A Markov chain Monte Carlo version of the genetic algorithm
Differential Evolution", Statistics and Computing 16:239): chain ``i`` proposes
``z_i + λ (z_a − z_b) + ε`` with ``a ≠ b`` two chains of its group and ``ε`` a small Gaussian
jitter; ``λ = 2.38 / √(2D)``, and ``λ = 1`` every tenth step (a jump between modes whose
difference the population holds). The group is split into two halves updated in turn, each
half's proposals drawn from the other half's current states (the split of Goodman & Weare's
ensemble samplers, Foreman-Mackey et al. 2013, arXiv:1202.3665): the proposal of a chain is
symmetric and independent of its own state, so every half step leaves each chain's target
invariant, whatever the other chains target.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["GroupedChains", "sample_groups"]

#: chains per group at least (a group of fewer draws runs this many and returns its first)
MIN_CHAINS = 32
#: prior candidates per group at least, and per chain
MIN_CANDIDATES, CANDIDATES_PER_CHAIN = 4096, 4
#: a mode jump (λ = 1) every this many steps
JUMP_EVERY = 10
#: jitter of a move, relative to the group's spread per dimension
JITTER = 0.01

#: the log target of a batch of chains: ``(z (C, D), group (C,)) → (C,)`` float64
LogTarget = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class GroupedChains:
    """The layout of ``C`` chains in ``G`` contiguous groups.

    Args:
        sizes: int64 ``(G,)``, chains per group (each ≥ 4).

    Attributes:
        sizes, start: int64 ``(G,)``, each group's size and first chain.
        group, rank: int64 ``(C,)``, each chain's group and its index within it.
    """

    def __init__(self, sizes: torch.Tensor) -> None:
        self.sizes = sizes
        self.start = torch.cumsum(sizes, 0) - sizes
        self.group = torch.repeat_interleave(torch.arange(len(sizes), device=sizes.device), sizes)
        self.rank = torch.arange(len(self.group), device=sizes.device) - self.start[self.group]

    def partners(self, half: int, generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
        """The chains of ``half`` (0: even ranks, 1: odd) and, for each, two distinct random
        chains of the other half of its group: ``(chains, a, b)``, int64 ``(C_half,)`` each."""
        chains = torch.nonzero(self.rank % 2 == half).squeeze(1)
        g = self.group[chains]
        other = 1 - half
        count = (self.sizes[g] - other + 1) // 2  # chains of the other half in the group (≥ 2)
        u = torch.rand(2, len(chains), generator=generator, device=chains.device)
        i = (u[0] * count).long().clamp_max(count - 1)
        j = (u[1] * (count - 1)).long().clamp_max(count - 2)
        j = j + (j >= i).long()  # distinct from i
        first = self.start[g] + other
        return chains, first + 2 * i, first + 2 * j


def _resample(
    log_w: torch.Tensor, layout: GroupedChains, per_group: int, generator: torch.Generator | None
) -> torch.Tensor:
    """For each chain, a candidate of its group drawn with probability ∝ ``exp(log_w)``.

    Args:
        log_w: float64 ``(G · per_group,)``, the candidates' log weights, group by group.

    Returns:
        int64 ``(C,)``, indices into the candidates.
    """
    w = log_w.reshape(-1, per_group)
    w = torch.exp(w - w.max(1, keepdim=True).values)
    w = torch.nan_to_num(w, nan=0.0)
    w = w / w.sum(1, keepdim=True).clamp_min(1e-300)
    # group g's cumulative weights shifted by g: one non-decreasing sequence for all groups
    offset = torch.arange(w.shape[0], device=w.device, dtype=w.dtype).unsqueeze(1)
    cdf = (torch.cumsum(w, 1).clamp_max(1.0) + offset).reshape(-1)
    g = layout.group
    u = torch.rand(len(g), generator=generator, device=w.device, dtype=w.dtype)
    pick = torch.searchsorted(cdf, g.to(w.dtype) + u)
    return torch.minimum(pick, g * per_group + per_group - 1)


def sample_groups(
    log_target: LogTarget,
    counts: torch.Tensor,
    dim: int,
    steps: int,
    generator: torch.Generator | None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draws from ``G`` densities ``p_g(z) ∝ exp(log_target(z, g))`` in the prior's z-space.

    ``log_target(z, g)`` is the whole log density of group ``g`` up to a constant, prior
    included. Each group starts from ``max(4096, 4 C_g)`` prior draws resampled by
    ``log_target − log N(z; 0, I)`` onto its ``C_g = max(count_g, 32)`` chains, then takes
    ``steps`` differential-evolution Metropolis steps (see the module docstring); a group's
    draws are its first ``count_g`` chains' last states.

    Args:
        log_target: ``(z (C, D), group (C,)) → (C,)`` float64; ``-inf`` where the density is 0.
        counts: int64 ``(G,)``, draws per group (≥ 1). dim: D. steps: Metropolis steps (≥ 0).
        generator: every random number. dtype: of the chains.

    Returns:
        ``(z, log_p)``: float64 ``(Σ count_g, D)`` group by group, and ``log_target`` there.

    References:
        Sampling-importance-resampling: D. B. Rubin (1988), "Using the SIR algorithm to
        simulate posterior distributions", Bayesian Statistics 3. The moves: see the module.
    """
    device = counts.device
    sizes = counts.clamp_min(MIN_CHAINS)
    layout = GroupedChains(sizes)
    per_group = max(MIN_CANDIDATES, CANDIDATES_PER_CHAIN * int(sizes.max()))
    groups = len(sizes)
    cand_group = torch.arange(groups, device=device).repeat_interleave(per_group)
    cand = torch.randn(groups * per_group, dim, generator=generator, device=device, dtype=dtype)
    log_prior = -0.5 * (cand * cand).sum(1) - 0.5 * dim * math.log(2 * math.pi)
    cand_lp = log_target(cand, cand_group)
    pick = _resample(cand_lp - log_prior, layout, per_group, generator)
    z, lp = cand[pick], cand_lp[pick]
    del cand, cand_lp, cand_group
    lam = 2.38 / math.sqrt(2 * dim)
    for step in range(steps):
        scale = lam if (step + 1) % JUMP_EVERY else 1.0
        spread = _group_spread(z, layout)
        for half in (0, 1):
            chains, a, b = layout.partners(half, generator)
            g = layout.group[chains]
            noise = torch.randn(len(chains), dim, generator=generator, device=device, dtype=dtype)
            proposal = z[chains] + scale * (z[a] - z[b]) + JITTER * spread[g] * noise
            lp_new = log_target(proposal, g)
            u = torch.rand(len(chains), generator=generator, device=device, dtype=torch.float64)
            accept = torch.log(u) < lp_new - lp[chains]
            z[chains] = torch.where(accept.unsqueeze(1), proposal, z[chains])
            lp[chains] = torch.where(accept, lp_new, lp[chains])
    keep = layout.start.repeat_interleave(counts) + _ranks(counts)
    return z[keep], lp[keep]


def _ranks(counts: torch.Tensor) -> torch.Tensor:
    """``0 … count_g − 1`` for each group, concatenated: int64 ``(Σ count_g,)``."""
    start = torch.cumsum(counts, 0) - counts
    return torch.arange(int(counts.sum()), device=counts.device) - start.repeat_interleave(counts)


def _group_spread(z: torch.Tensor, layout: GroupedChains) -> torch.Tensor:
    """Standard deviation of each group's chains per dimension, float ``(G, D)``; a group whose
    chains all sit at one point gets ``1e-3`` of the prior's scale (so its jitter moves)."""
    g = layout.group
    n = layout.sizes.to(z.dtype).unsqueeze(1)
    total = torch.zeros(len(layout.sizes), z.shape[1], dtype=z.dtype, device=z.device)
    mean = total.index_add(0, g, z) / n
    centred = z - mean[g]
    var = total.index_add(0, g, centred * centred) / (n - 1)
    spread = var.sqrt()
    return torch.where(spread > 0, spread, torch.full_like(spread, 1e-3))
