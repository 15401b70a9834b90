"""Expensive simulators: one that costs CPU time (``test_05_simulators``), one that sleeps
(``test_07_nodes``)."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["BusySimulator", "SleepSimulator"]

_WORK_FLOATS = 4096  # the array the work loop keeps rewriting (32 KiB: stays in cache)


class BusySimulator:
    """``x = θ + noise · ε`` after ``ms`` milliseconds of CPU work per sample.

    The work is numpy arithmetic on a small array in the calling thread, repeated until that
    thread's CPU clock (:func:`time.thread_time`) has advanced by ``ms`` ms for the row: work,
    not a sleep — a descheduled process takes longer on the wall clock, as a real simulator
    does, and more BLAS threads do not make it cheaper.

    Args:
        ms: CPU milliseconds per sample (≥ 0; 0 simulates at once).
        noise: standard deviation of ε (≥ 0).

    Raises:
        ValueError: a negative ``ms`` or ``noise``.
    """

    def __init__(self, ms: float = 20.0, noise: float = 0.1) -> None:
        if ms < 0 or noise < 0:
            raise ValueError(f"BusySimulator: ms and noise must be >= 0, got {ms}, {noise}")
        self.ms, self.noise = float(ms), float(noise)
        self._work = np.linspace(0.0, 1.0, _WORK_FLOATS)

    def simulate_batch(self, n: int, theta: np.ndarray, rng: np.random.Generator | None = None):
        """θ float64 ``(n, D)`` → x float64 ``(n, D)``, ``n · ms`` ms of CPU spent first."""
        rng = np.random.default_rng() if rng is None else rng
        cost = self.ms / 1000.0
        for _ in range(int(n)):
            start = time.thread_time()
            while time.thread_time() - start < cost:
                np.sin(self._work, out=self._work)
        theta = np.asarray(theta, dtype=np.float64)
        return theta + self.noise * rng.normal(size=theta.shape)


class SleepSimulator:
    """``x = θ + noise · ε`` after sleeping ``ms`` milliseconds per sample.

    An expensive simulator that runs elsewhere (an external code on another machine, a queue)
    costs the calling process no CPU: a sleep measures exactly what the orchestration around
    it costs (``benchmarks/test_07_nodes.py``).

    Args:
        ms: wall-clock milliseconds per sample (≥ 0; a call of n rows sleeps ``n · ms`` ms).
        noise: standard deviation of ε (≥ 0).

    Raises:
        ValueError: a negative ``ms`` or ``noise``.
    """

    def __init__(self, ms: float = 100.0, noise: float = 0.1) -> None:
        if ms < 0 or noise < 0:
            raise ValueError(f"SleepSimulator: ms and noise must be >= 0, got {ms}, {noise}")
        self.ms, self.noise = float(ms), float(noise)

    def simulate_batch(self, n: int, theta: np.ndarray, rng: np.random.Generator | None = None):
        """θ float64 ``(n, D)`` → x float64 ``(n, D)``, after ``n · ms`` ms of sleep."""
        rng = np.random.default_rng() if rng is None else rng
        time.sleep(int(n) * self.ms / 1000.0)
        theta = np.asarray(theta, dtype=np.float64)
        return theta + self.noise * rng.normal(size=theta.shape)
