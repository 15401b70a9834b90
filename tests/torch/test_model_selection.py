"""Model selection on a validation set drawn from a proposal: every model scored on one target.

The fault: the best model is kept when its validation loss beats the current model's, and a
GaussianHead's loss scores ``q``, which fits ``r · L`` for the head's own reference ``r``
(running moments of the buffer it was trained on). Two heads with different references are
then scored against different targets: one whose reference is narrower around the validation
rows can win with a worse likelihood. (Suspected on 2026-12-01 as the cause of example 05
keeping an epoch-15 model 0.35–0.44 σ off; it was not — those launches still did so with this
fix, and stopped doing so with gradient clipping — but the comparison was unfair all the same.)

Here two heads are built by hand on a one-dimensional linear Gaussian model ``x = z + ε``,
``ε ~ N(0, 0.5²)``, validation rows drawn from the proposal ``N(1, 0.5²)``: head A with a
reference ``N(1, 0.4²)`` and a likelihood peaking 0.3 too high, head B with the buffer's wider
reference ``N(1, 0.6²)`` and the true likelihood. The plain loss
prefers A; the validation score (every head's likelihood combined with the validation rows' own
Gaussian) prefers B; on a head's own reference the score is its loss.
"""

from __future__ import annotations

import math

import pytest
import torch

from kestrel_torch.data._rows import Rows
from kestrel_torch.estimators._gaussian import GaussianHead
from kestrel_torch.estimators._loss import validation_reference

NOISE = 0.5  # σ of ε
ROWS = 4000


def head(ref_mean: float, ref_var: float, shift: float = 0.0) -> GaussianHead:
    """A GaussianHead (s = x, E = 1) whose q is the posterior of ``N(ref_mean, ref_var)`` times
    the likelihood ``N(x; z − shift, NOISE²)``: ``q(z | x) = N(a + b (x + shift), 1/P)``."""
    h = GaussianHead(1, 1, hidden_dim=4, num_layers=1, momentum=0.01, min_var=1e-20)
    prec = 1.0 / ref_var + 1.0 / NOISE**2
    a, b = ref_mean / ref_var / prec, 1.0 / NOISE**2 / prec
    with torch.no_grad():
        stats = h.latent_stats
        stats.mean.fill_(ref_mean)
        stats.cov.fill_(ref_var)
        stats.count.fill_(ROWS)
        h.context_stats.mean.fill_(0.0)
        h.context_stats.cov.fill_(1.0)
        h.context_stats.count.fill_(ROWS)
        sd = math.sqrt(ref_var)
        # μ(s) = m_r + σ_r (W s + bias), the MLP's output layer is zero
        h.skip.weight.fill_(b / sd)
        h._output.bias.fill_((a + b * shift - ref_mean) / sd)
        h.residual_cov.fill_(1.0 / prec)
    return h.eval()


@pytest.fixture(scope="module")
def rows() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validation rows drawn from the proposal ``N(1, 0.5²)``, with their log densities."""
    g = torch.Generator().manual_seed(7)
    z = 1.0 + 0.5 * torch.randn(ROWS, 1, generator=g, dtype=torch.float64)
    x = z + NOISE * torch.randn(ROWS, 1, generator=g, dtype=torch.float64)
    log_prob = -0.5 * ((z[:, 0] - 1.0) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    return z, x, log_prob


def test_the_plain_loss_prefers_a_narrow_reference_over_the_right_likelihood(rows) -> None:
    z, x, log_prob = rows
    wrong, right = head(1.0, 0.4**2, shift=0.3), head(1.0, 0.6**2)
    with torch.no_grad():
        assert float(wrong.loss(z, x, log_prob).total()) < float(right.loss(z, x, log_prob).total())


def test_the_validation_score_prefers_the_right_likelihood(rows) -> None:
    z, x, log_prob = rows
    wrong, right = head(1.0, 0.4**2, shift=0.3), head(1.0, 0.6**2)
    reference = validation_reference([Rows(z, torch.zeros(ROWS), log_prob, {})])
    assert reference is not None
    with torch.no_grad():
        # expected margin ≈ 0.1 nats: on N(1, 0.5²), A's mean is 0.15 off where σ is 0.35
        wrong_score = float(wrong.validation_loss(z, x, log_prob, reference).total())
        right_score = float(right.validation_loss(z, x, log_prob, reference).total())
    assert right_score < wrong_score - 0.05, (right_score, wrong_score)


def test_a_head_scored_on_its_own_reference_scores_its_loss(rows) -> None:
    z, x, log_prob = rows
    for h in (head(1.0, 0.25, shift=0.3), head(0.0, 1.0), head(-0.5, 3.0, shift=-0.2)):
        with torch.no_grad():
            own = h.validation_loss(
                z, x, log_prob, (h.latent_stats.mean, h.latent_stats.covariance)
            )
            plain = h.loss(z, x, log_prob)
        assert torch.allclose(own.loss, plain.loss, rtol=1e-9, atol=1e-9)
        assert torch.allclose(own.log_weight, plain.log_weight, rtol=1e-9, atol=1e-9)
