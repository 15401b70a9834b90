"""How busy the GPU is while a benchmark runs (the original's "GPU 30–70 % busy")."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["UtilizationSampler"]


class UtilizationSampler:
    """Sample ``torch.cuda.utilization()`` (NVML: percent of time a kernel ran) in a thread.

    Args:
        interval: seconds between samples.

    Use as a context manager; afterwards :attr:`mean` is the mean fraction in ``[0, 1]``, or
    ``None`` with :attr:`error` saying why (no CUDA, no ``pynvml``/NVML).
    """

    def __init__(self, interval: float = 0.05):
        self._interval = float(interval)
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def _run(self) -> None:
        import torch

        while not self._stop.wait(self._interval):
            try:
                self._samples.append(float(torch.cuda.utilization()) / 100.0)
            except Exception as err:  # NVML missing: report, do not fail the benchmark
                self.error = f"{type(err).__name__}: {err}"
                return

    def __enter__(self) -> UtilizationSampler:
        self._thread = threading.Thread(
            target=self._run, name="kestrel-bench-gpu-busy", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def mean(self) -> float | None:
        """Mean busy fraction over the samples, or ``None`` without samples."""
        return sum(self._samples) / len(self._samples) if self._samples else None
