"""Population sampling of prior × likelihood^γ when the likelihood is known up to a constant:
sequential Monte Carlo from the prior with adaptive tempering, then differential-evolution
Metropolis moves.

Shape symbols: C chains, D dimensions, G groups (chains that share a target).

:class:`MCMCPosterior` is the posterior of a likelihood potential sampled this way (the role of
sbi's ``MCMCPosterior``): :class:`~kestrel_torch.FlowLikelihood`'s learned likelihood has no
sampler of its own, and its network head hands its ``log q(s | z)`` to one. Chains come in **groups**: every chain of a group targets the same
density (the posterior of one observation), and its moves are built from the states of other
chains of the same group only. In z-space (the prior's standard-normal space) the prior is
``N(0, I)``.

**Tempering** (Del Moral, Doucet & Jasra 2006, "Sequential Monte Carlo samplers", JRSS B
68:411; the adaptive schedule of Jasra et al. 2011, Scand. J. Stat. 38:1): the chains start as
prior draws, targeting ``N(z; 0, I) · L(z)^β`` with β = 0. Each stage raises a group's β as far
as keeps the effective sample size of the incremental weights ``L^Δβ`` at 90 % of its chains
(:data:`ESS_KEPT`; at most to γ), resamples by those weights and takes :data:`MOVES`
Metropolis steps at the new β.
A posterior far narrower than the prior, or with several separate modes, is reached through a
sequence of intermediate ones, never by a few lucky prior draws.

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

__all__ = ["GroupedChains", "MCMCPosterior", "log_standard_normal", "sample_groups"]

#: chains per group at least (a group of fewer draws runs this many and returns its first)
MIN_CHAINS = 64
#: chains per group at most: a group of more draws takes several states of each chain, one
#: every THIN steps after the last step asked for
MAX_CHAINS, THIN = 4096, 10
#: Metropolis steps after each tempering stage
MOVES = 4
#: the effective sample size a tempering stage keeps, as a fraction of the chains: at 0.5,
#: SLCP's posterior took 5 stages and the mass of its four modes varied from draw to draw
#: (13–36 % each, seeds 7–9); at 0.9, 15 stages and 17–38 % (the same 3 modes ahead each time,
#: which is the learned likelihood's doing), C2ST 0.731 → 0.699 for the same weights
ESS_KEPT = 0.9
#: at most this many tempering stages (then β jumps to γ)
MAX_STAGES = 100
#: a mode jump (λ = 1) every this many steps
JUMP_EVERY = 10
#: jitter of a move, relative to the group's spread per dimension
JITTER = 0.01

#: the log likelihood of a batch of chains: ``(z (C, D), group (C,)) → (C,)`` float64
LogLikelihood = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: a likelihood potential: ``(s (N, E) or (1, E), z (N, D)) → log L(s | z)`` float64 ``(N,)``
Potential = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: rows of chains per evaluation of the potential while sampling
ROWS_PER_PASS = 1 << 16


def log_standard_normal(z: torch.Tensor) -> torch.Tensor:
    """``log N(z; 0, I)`` (the prior in z-space), float64 ``(...)`` of ``z`` ``(..., D)``."""
    z = z.to(torch.float64)
    return -0.5 * (z * z).sum(-1) - 0.5 * z.shape[-1] * math.log(2 * math.pi)


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

    def sums(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sums of ``values`` ``(C, ...)``: ``(G, ...)``."""
        out = values.new_zeros((len(self.sizes), *values.shape[1:]))
        return out.index_add(0, self.group, values)


def _group_weights(log_w: torch.Tensor, layout: GroupedChains) -> torch.Tensor:
    """Weights ``exp(log_w)`` normalised within each group (float64 ``(C,)``; a group whose
    weights are all 0 or undefined gets equal ones)."""
    g = layout.group
    top = torch.full((len(layout.sizes),), -math.inf, dtype=log_w.dtype, device=log_w.device)
    top = top.scatter_reduce(0, g, log_w, "amax")
    w = torch.exp(log_w - top[g])
    w = torch.where(torch.isfinite(w), w, torch.zeros_like(w))
    total = layout.sums(w)
    empty = total[g] <= 0
    w = torch.where(empty, torch.ones_like(w), w)
    return w / layout.sums(w)[g]


def _ess(log_l: torch.Tensor, delta: torch.Tensor, layout: GroupedChains) -> torch.Tensor:
    """Effective sample size per group of the weights ``L^Δ`` (``delta`` ``(G,)``)."""
    w = _group_weights(delta[layout.group] * log_l, layout)
    return 1.0 / layout.sums(w * w)


def _next_delta(
    log_l: torch.Tensor, beta: torch.Tensor, gamma: float, layout: GroupedChains
) -> torch.Tensor:
    """The largest increase ``Δ ≤ γ − β`` per group whose weights keep an effective sample
    size of :data:`ESS_KEPT` of the group's chains (bisection; 0 for groups already at γ)."""
    target = ESS_KEPT * layout.sizes.to(log_l.dtype)
    room = (gamma - beta).clamp_min(0.0)
    full = _ess(log_l, room, layout) >= target
    lo, hi = torch.zeros_like(room), room.clone()
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        ok = _ess(log_l, mid, layout) >= target
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    # at least a small step, so a stage always moves on
    return torch.where(full, room, torch.maximum(lo, 1e-4 * room))


def _resample(
    w: torch.Tensor, layout: GroupedChains, generator: torch.Generator | None
) -> torch.Tensor:
    """For each chain, a chain of its group drawn with probability ``w`` (normalised within
    groups): systematic resampling, int64 ``(C,)``."""
    g = layout.group
    # group g's cumulative weights shifted by g: one non-decreasing sequence for all groups
    cdf = torch.cumsum(w, 0) - (layout.sums(w).cumsum(0) - layout.sums(w))[g] + g.to(w.dtype)
    u = torch.rand(len(layout.sizes), generator=generator, device=w.device, dtype=w.dtype)
    points = g.to(w.dtype) + (layout.rank.to(w.dtype) + u[g]) / layout.sizes[g].to(w.dtype)
    pick = torch.searchsorted(cdf, points, right=True)
    last = layout.start[g] + layout.sizes[g] - 1
    return torch.minimum(torch.maximum(pick, layout.start[g]), last)


class MCMCPosterior:
    """The posterior ``∝ N(z; 0, I) · L(s | z)`` of a likelihood potential in the prior's
    z-space, drawn by :func:`sample_groups` (one group of chains per distinct observation).

    Densities are unnormalised: :meth:`log_prob` is ``log N(z) + log L(s | z)``, the
    posterior's log density plus ``log p(s)`` (a constant for one observation: it ranks the
    draws of one observation, as highest-density checks do).

    Args:
        potential: ``log L(s | z)``, float64 ``(N,)`` of ``s`` ``(N, E)`` (or ``(1, E)``,
            broadcast) and float64 ``z`` ``(N, D)``.
        dim: D. steps: Metropolis steps of a draw at γ = 1. proposal_steps: the same at
            γ < 1 (a tempered proposal).
    """

    def __init__(self, potential: Potential, dim: int, *, steps: int, proposal_steps: int) -> None:
        self.potential = potential
        self.dim = int(dim)
        self.steps = int(steps)
        self.proposal_steps = int(proposal_steps)

    def sample(
        self, s: torch.Tensor, n: int, gamma: float, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` draws of ``∝ N(z; 0, I) · L(s_i | z)^γ``: draw ``i`` for the observation of
        row ``i`` of ``s`` ``(n, E)`` (or every draw for one row ``(1, E)``).

        Returns:
            ``(z, log_p)``: float64 ``(n, D)`` and the unnormalised log density of each draw.
        """
        if s.shape[0] == 1:
            rows, inverse = s, torch.zeros(n, dtype=torch.long, device=s.device)
        else:
            rows, inverse = torch.unique(s, dim=0, return_inverse=True)
        counts = torch.bincount(inverse, minlength=rows.shape[0])

        def log_likelihood(z: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
            parts = []
            for a in range(0, z.shape[0], ROWS_PER_PASS):
                zc, gc = z[a : a + ROWS_PER_PASS], group[a : a + ROWS_PER_PASS]
                parts.append(self.potential(rows[gc], zc))
            return torch.cat(parts)

        steps = self.steps if gamma >= 1.0 else self.proposal_steps
        z, log_p = sample_groups(log_likelihood, counts, self.dim, gamma, steps, generator)
        # draws come group by group; row i takes the next draw of its group
        order = torch.argsort(inverse, stable=True)
        out_z, out_lp = torch.empty_like(z), torch.empty_like(log_p)
        out_z[order], out_lp[order] = z, log_p
        return out_z, out_lp

    def log_prob(self, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """``log N(z; 0, I) + log L(s | z)``, float64 ``(N,)``: the posterior's log density
        up to ``log p(s)``."""
        return log_standard_normal(z) + self.potential(s, z)


def sample_groups(
    log_likelihood: LogLikelihood,
    counts: torch.Tensor,
    dim: int,
    gamma: float,
    steps: int,
    generator: torch.Generator | None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draws from ``G`` densities ``p_g(z) ∝ N(z; 0, I) · L_g(z)^γ`` in the prior's z-space.

    Each group runs ``C_g = clip(count_g, 64, 1024)`` chains: tempered from the prior to γ
    (see the module docstring), then ``steps`` differential-evolution Metropolis steps. A
    group's draws are its chains' states after them; a group of more draws than chains takes
    ``k = ⌈count_g / C_g⌉`` states of each chain, :data:`THIN` steps apart.

    Args:
        log_likelihood: ``(z (C, D), group (C,)) → (C,)`` float64, ``log L_g(z)`` up to a
            constant per group; ``-inf`` where it is 0.
        counts: int64 ``(G,)``, draws per group (≥ 1). dim: D. gamma: > 0. steps: Metropolis
            steps at γ (≥ 0). generator: every random number. dtype: of the chains.

    Returns:
        ``(z, log_p)``: float64 ``(Σ count_g, D)`` group by group, and
        ``log N(z; 0, I) + γ log L_g(z)`` there.
    """
    device = counts.device
    sizes = counts.clamp(MIN_CHAINS, MAX_CHAINS)
    layout = GroupedChains(sizes)
    groups = len(sizes)
    z = torch.randn(int(sizes.sum()), dim, generator=generator, device=device, dtype=dtype)
    log_l = log_likelihood(z, layout.group)
    beta = torch.zeros(groups, dtype=torch.float64, device=device)
    mover = _Mover(log_likelihood, layout, dim, generator)
    for _ in range(MAX_STAGES):
        if bool((beta >= gamma).all()):
            break
        delta = _next_delta(log_l, beta, gamma, layout)
        w = _group_weights(delta[layout.group] * log_l, layout)
        pick = _resample(w, layout, generator)
        z, log_l = z[pick], log_l[pick]
        beta = torch.where(
            beta + delta >= gamma * (1 - 1e-9), torch.full_like(beta, gamma), beta + delta
        )
        for _ in range(MOVES):
            z, log_l = mover.step(z, log_l, beta)
    beta = torch.full_like(beta, gamma)
    states = int(((counts + sizes - 1) // sizes).max())
    kept: list[tuple[torch.Tensor, torch.Tensor]] = [] if steps else [(z.clone(), log_l.clone())]
    for step in range(1, steps + THIN * (states - 1) + 1):
        z, log_l = mover.step(z, log_l, beta)
        if step >= steps and (step - steps) % THIN == 0:
            kept.append((z.clone(), log_l.clone()))
    # draw i of group g: state i // C_g of chain i % C_g
    group = torch.arange(groups, device=device).repeat_interleave(counts)
    i = _ranks(counts)
    which = i // sizes[group]
    chain = layout.start[group] + i % sizes[group]
    out_z = torch.stack([k[0] for k in kept])[which, chain]
    out_l = torch.stack([k[1] for k in kept])[which, chain]
    return out_z, log_standard_normal(out_z) + gamma * out_l


class _Mover:
    """Differential-evolution Metropolis steps at per-group temperatures (the module's moves)."""

    def __init__(
        self,
        log_likelihood: LogLikelihood,
        layout: GroupedChains,
        dim: int,
        generator: torch.Generator | None,
    ) -> None:
        self.log_likelihood, self.layout, self.dim, self.generator = (
            log_likelihood,
            layout,
            dim,
            generator,
        )
        self.count = 0

    def step(
        self, z: torch.Tensor, log_l: torch.Tensor, beta: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of both halves at ``β`` ``(G,)``: the new ``(z, log_l)``."""
        layout, gen = self.layout, self.generator
        self.count += 1
        scale = 1.0 if self.count % JUMP_EVERY == 0 else 2.38 / math.sqrt(2 * self.dim)
        spread = _group_spread(z, layout)
        for half in (0, 1):
            chains, a, b = layout.partners(half, gen)
            g = layout.group[chains]
            noise = torch.randn(
                len(chains), self.dim, generator=gen, device=z.device, dtype=z.dtype
            )
            proposal = z[chains] + scale * (z[a] - z[b]) + JITTER * spread[g] * noise
            l_new = self.log_likelihood(proposal, g)
            old = z[chains]
            log_ratio = -0.5 * ((proposal * proposal).sum(1) - (old * old).sum(1)).to(
                torch.float64
            ) + beta[g] * (l_new - log_l[chains])
            log_ratio = torch.nan_to_num(log_ratio, nan=-math.inf)
            u = torch.rand(len(chains), generator=gen, device=z.device, dtype=torch.float64)
            accept = torch.log(u) < log_ratio
            z = z.index_put((chains,), torch.where(accept.unsqueeze(1), proposal, old))
            log_l = log_l.index_put((chains,), torch.where(accept, l_new, log_l[chains]))
        return z, log_l


def _ranks(counts: torch.Tensor) -> torch.Tensor:
    """``0 … count_g − 1`` for each group, concatenated: int64 ``(Σ count_g,)``."""
    start = torch.cumsum(counts, 0) - counts
    return torch.arange(int(counts.sum()), device=counts.device) - start.repeat_interleave(counts)


def _group_spread(z: torch.Tensor, layout: GroupedChains) -> torch.Tensor:
    """Standard deviation of each group's chains per dimension, float ``(G, D)``; a dimension
    in which a group's chains all agree gets ``1e-9`` of the prior's scale."""
    n = layout.sizes.to(z.dtype).unsqueeze(1)
    mean = layout.sums(z) / n
    centred = z - mean[layout.group]
    spread = (layout.sums(centred * centred) / (n - 1)).sqrt()
    return torch.where(spread > 0, spread, torch.full_like(spread, 1e-9))
