"""Benchmark data: example 05's shapes, drawn once from a seed, and a simulator that replays them.

Shape symbols: N samples, D = 10 parameters, K = 1000 bins. Every benchmark works on the trace
of ``05_linear_regression`` — ``theta`` float64 ``(N, D)`` with its prior ``log_prob`` ``(N,)``,
``mu = theta Φᵀ`` and ``x = mu + N(0, 0.1²)``, both float64 ``(N, K)`` — so one sample is
16,088 bytes and N = 1024 samples are 16.5 MB.
"""

from __future__ import annotations

import numpy as np

from kestrel_core import Graph, Product

__all__ = [
    "SIZES",
    "SCALE_SIZES",
    "GATE_N",
    "N_PARAMS",
    "N_BINS",
    "SIGMA",
    "DATA_KEYS",
    "TRAIN_KEYS",
    "design_matrix",
    "make_samples",
    "prior",
    "Replay",
    "replay_graph",
]

#: sample counts every group runs at (parametrize ids ``N=256`` …)
SIZES = (256, 1024, 8192)
#: the sizes of ``benchmarks/test_06_scale.py`` (``bench:scale``, not in ``bench:check``)
SCALE_SIZES = (8192, 16384, 32768, 65536)
#: the size at which the gate applies its floors
GATE_N = 1024
N_PARAMS = 10
N_BINS = 1000
SIGMA = 0.1
#: the three value keys of the data-path groups (θ, μ, x)
DATA_KEYS = ("theta.value", "mu.value", "x.value")
#: what the GaussianPosterior of example 05 trains from (θ, its proposal log density, x, scaffold μ)
TRAIN_KEYS = ("theta.value", "theta.log_prob", "x.value", "mu.value")


def design_matrix(n_bins: int = N_BINS, n_params: int = N_PARAMS) -> np.ndarray:
    """Φ, float64 ``(K, D)``: ``Φ[i, k] = sin((k + 1) t_i)``, t equispaced on ``[0, 2π)``."""
    t = np.linspace(0.0, 2.0 * np.pi, n_bins, endpoint=False)
    return np.sin(np.outer(t, np.arange(1, n_params + 1)))


def prior() -> Product:
    """Example 05's prior: ``N(0, 1)`` in each of the D = 10 dimensions."""
    return Product([["normal", 0.0, 1.0]] * N_PARAMS)


def make_samples(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` samples of example 05, drawn from the prior.

    Args:
        n: number of samples N (≥ 0).
        seed: seed of the ``numpy.random.Generator``.

    Returns:
        Flat key → new float64 array: ``theta.value`` ``(N, 10)``, ``theta.log_prob`` ``(N,)``,
        ``mu.value`` and ``x.value`` ``(N, 1000)``.
    """
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((n, N_PARAMS))
    mu = theta @ design_matrix().T
    x = mu + SIGMA * rng.standard_normal(mu.shape)
    return {
        "theta.value": theta,
        "theta.log_prob": prior().log_prob(theta),
        "mu.value": mu,
        "x.value": x,
    }


class Replay:
    """A simulator that hands out rows of one pre-simulated key in order, wrapping around.

    It keeps the simulator's CPU out of a benchmark that measures the data path: every replica
    built with the same ``rows`` and ``seed`` holds the same table, and nodes called with the
    same ``n`` advance in step, so a ``theta → mu → x`` graph of replays yields the rows of
    :func:`make_samples` that belong together. Parents are accepted and ignored.

    Args:
        key: flat key of :func:`make_samples` to replay, e.g. ``"x.value"``.
        rows: size of the table (the largest call should not exceed it).
        seed: seed of :func:`make_samples`.
    """

    def __init__(self, key: str, rows: int = max(SIZES), seed: int = 0):
        self._data = make_samples(int(rows), seed)[key]
        self._pos = 0

    def simulate_batch(self, n: int, *parents: np.ndarray) -> np.ndarray:
        """The next ``n`` rows, float64 ``(n, *D)`` (a view of the table when they do not wrap)."""
        total = self._data.shape[0]
        start, self._pos = self._pos, (self._pos + n) % total
        if start + n <= total:
            return self._data[start : start + n]
        return self._data[(start + np.arange(n)) % total]


def replay_graph(rows: int = max(SIZES), seed: int = 0) -> Graph:
    """``theta → mu → x`` of example 05, each node a :class:`Replay` (no estimator).

    Args:
        rows, seed: passed to every :class:`Replay`.
    """
    graph = Graph()
    graph.add_node(
        "theta",
        {"_target_": f"{__name__}.Replay", "key": "theta.value", "rows": rows, "seed": seed},
    )
    graph.add_node(
        "mu",
        {"_target_": f"{__name__}.Replay", "key": "mu.value", "rows": rows, "seed": seed},
        parents=["theta"],
    )
    graph.add_node(
        "x",
        {"_target_": f"{__name__}.Replay", "key": "x.value", "rows": rows, "seed": seed},
        parents=["mu"],
    )
    graph.validate()
    return graph
