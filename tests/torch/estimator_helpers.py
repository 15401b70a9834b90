"""Helpers for the estimator tests: a linear-Gaussian problem with its analytic posterior."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from kestrel_core import EstimatorContext, InMemoryStore, Product


@dataclass
class LinearGaussian:
    """θ ~ N(0, I_D), x = A θ + N(0, σ² I_K); posterior N(μ(x), Σ) with Σ = (AᵀA/σ² + I)⁻¹."""

    a: np.ndarray  # (K, D)
    sigma: float = 0.1

    @classmethod
    def make(cls, d: int = 3, k: int = 5, seed: int = 0, sigma: float = 0.1) -> LinearGaussian:
        return cls(np.random.default_rng(seed).normal(size=(k, d)) / np.sqrt(d), sigma)

    @property
    def prior(self) -> Product:
        return Product([["normal", 0.0, 1.0]] * self.a.shape[1])

    def context(self, seed: int = 1) -> EstimatorContext:
        return EstimatorContext(node="theta", prior=self.prior, evidence=("x",), seed=seed)

    def simulate(self, theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return theta @ self.a.T + self.sigma * rng.normal(size=(theta.shape[0], self.a.shape[0]))

    @property
    def cov(self) -> np.ndarray:
        return np.linalg.inv(self.a.T @ self.a / self.sigma**2 + np.eye(self.a.shape[1]))

    def mean(self, x: np.ndarray) -> np.ndarray:
        return self.cov @ self.a.T @ x / self.sigma**2

    def tempered(self, x: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of prior × likelihood^γ at x."""
        prec = self.a.T @ self.a * gamma / self.sigma**2 + np.eye(self.a.shape[1])
        cov = np.linalg.inv(prec)
        return cov @ self.a.T @ x * gamma / self.sigma**2, cov

    def block(
        self, theta: np.ndarray, log_prob: np.ndarray, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        return {
            "theta.value": theta,
            "theta.log_prob": log_prob,
            "x.value": self.simulate(theta, rng),
        }

    def prior_block(self, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        theta = rng.normal(size=(n, self.a.shape[1]))
        return self.block(theta, self.prior.log_prob(theta), rng)

    def gaussian_block(
        self, n: int, mean: np.ndarray, cov: np.ndarray, rng: np.random.Generator
    ) -> dict[str, np.ndarray]:
        """``n`` draws from N(mean, cov) with their log density (θ-space = z-space here)."""
        theta = rng.multivariate_normal(mean, cov, size=n)
        diff = theta - mean
        sol = np.linalg.solve(cov, diff.T).T
        log_prob = -0.5 * (diff * sol).sum(1) - 0.5 * np.linalg.slogdet(2 * np.pi * cov)[1]
        return self.block(theta, log_prob, rng)


def filled_store(blocks: list[dict[str, np.ndarray]], validation: int = 256) -> InMemoryStore:
    """An InMemoryStore holding ``blocks``; the newest ``validation`` samples validate."""
    total = sum(len(b["theta.value"]) for b in blocks)
    store = InMemoryStore(min_samples=0, max_samples=total, validation_samples=validation)
    for block in blocks:
        store.append(block, len(block["theta.value"]))
    return store


def mvn_logpdf(values: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Log density of N(mean, cov) at ``values`` ``(N, D)``."""
    diff = values - mean
    sol = np.linalg.solve(cov, diff.T).T
    return -0.5 * (diff * sol).sum(1) - 0.5 * np.linalg.slogdet(2 * np.pi * cov)[1]


class BasisEmbedding(nn.Module):
    """Case K13: keeps a projection basis as a *plain attribute*, set on the first training forward.

    Until then (or if the attribute were lost) it returns zeros: no information about θ, so a
    posterior built on it is the prior. The learned basis is the top principal directions of
    the first training batch of ``x``.
    """

    def __init__(self, components: int = 3) -> None:
        super().__init__()
        self.components = components
        self.basis: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.basis is None:
            centred = x.detach() - x.detach().mean(0)
            self.basis = torch.linalg.svd(centred, full_matrices=False)[2][
                : self.components
            ].T.clone()
        if self.basis is None:
            return torch.zeros(x.shape[0], self.components, dtype=x.dtype, device=x.device)
        return x @ self.basis.to(x.dtype)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op thread: the estimator tests train small networks, for which a second thread
    costs more in synchronisation than it gains (ten times more on a busy 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
