"""The ``training`` groups: estimator steps fed by the store and loader, or by tensors.

What is measured (group ``training``; ``training_flow`` the same with a
:class:`~kestrel_torch.FlowPosterior` instead): optimizer steps of example 05's
:class:`~kestrel_torch.GaussianPosterior` (``SignalProjection`` embedding on ``x`` with scaffold ``mu``, batch 128) through the
estimator's own training step (``StepwiseEstimator._train_step``: finite-row mask, embedding,
loss with the proposal correction, backward, Adam step). The loop around it is the one of
``kestrel_torch.train._fit.fit`` without validation and end-of-epoch refit (the same in both
arms and independent of where data comes from): a ``sync()`` of the cache every epoch
(``count // batch_size`` steps) and ``sample_batch`` before every step.

* Kestrel: batches come from the estimator's own :class:`~kestrel_torch.CachedDataLoader`
  (``StepwiseEstimator._loader``, θ mapped to standard-normal space in its background thread)
  over a store holding example 05's buffer (2048 training + 256 validation samples), while an
  :class:`Appender` thread adds pre-simulated blocks of 128 samples every 0.1 s (example 05's
  ``simulate_count`` and ``simulate_interval``), so the buffer turns over and every sync has
  new rows to fetch.
* Baseline: the same steps on a :class:`~kestrel_bench.TensorSet` of the same 2048 samples
  already on the device, with nothing appended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "ESTIMATORS",
    "EXAMPLE_05",
    "BUFFER_05",
    "RESIMULATION_05",
    "make_estimator",
    "train_steps",
    "Appender",
    "tensor_set",
]

#: example 05's estimator configuration (config.yml), on the given device
EXAMPLE_05: dict[str, Any] = {
    "batch_size": 128,
    "lr": 1e-3,
    "gamma": 0.5,
    "embedding": {
        "_target_": "kestrel_torch.embeddings.SignalProjection",
        "_input_": ["x", "mu"],
        "n_components": 10,
    },
}
#: example 05's buffer rules
BUFFER_05 = {"min_samples": 2048, "max_samples": 2048, "validation_samples": 256}
#: example 05's resimulation: ``simulate_count`` samples every ``simulate_interval`` seconds
RESIMULATION_05 = (128, 0.1)


#: the estimator class each ``training`` group measures, with example 05's options; the flow is
#: FlowPosterior's default (3 spline transforms of 64×64, APT with 10 atoms)
ESTIMATORS: dict[str, str] = {"training": "GaussianPosterior", "training_flow": "FlowPosterior"}


def make_estimator(device: str = "cpu", seed: int = 0, group: str = "training") -> Any:
    """A set-up estimator for node ``theta`` of example 05 (evidence x, scaffold mu): the
    GaussianPosterior of example 05's config, or for ``group="training_flow"`` a FlowPosterior
    with the same embedding, batch size and learning rate."""
    import kestrel_torch
    from kestrel_core import EstimatorContext

    from ._data import prior

    est = getattr(kestrel_torch, ESTIMATORS[group])(**EXAMPLE_05, device=device, seed=seed)
    est.setup(
        EstimatorContext(node="theta", prior=prior(), evidence=("x",), scaffolds=("mu",), seed=seed)
    )
    return est


def train_steps(
    estimator: Any, source: Any, steps: int, *, sync: bool, durations: list | None = None
) -> int:
    """Run ``steps`` training steps of ``estimator`` on batches of ``source``.

    Args:
        estimator: a set-up :class:`~kestrel_torch.StepwiseEstimator`.
        source: a :class:`~kestrel_torch.CachedDataLoader` or a :class:`~kestrel_bench.TensorSet`.
        steps: number of optimizer steps.
        sync: call ``source.sync()`` at the start of every epoch (``count // batch_size`` steps).
        durations: if given, each step's wall time in seconds (sync and batch included) is appended.

    Returns:
        The number of steps whose loss was finite (all of them, unless the data is broken).
    """
    batch_size = estimator.config["batch_size"]
    good = 0
    epoch = max(1, source.count // batch_size)
    clock = time.perf_counter
    for step in range(steps):
        start = clock()
        if sync and step % epoch == 0:
            source.sync()
            epoch = max(1, source.count // batch_size)
        loss = estimator._train_step(
            source.sample_batch(batch_size, estimator._binding.batch_generator)
        )
        good += loss is not None
        if durations is not None:
            durations.append(clock() - start)
    return good


def tensor_set(estimator: Any, arrays: dict, device: Any) -> Any:
    """The baseline's in-memory tensors: ``arrays`` as the loader would cache them.

    θ goes through the estimator's own loader transform (``Columns.to_latent``: z and log|det|), every
    key is float64 as in the loader's cache.
    """
    import numpy as np
    import torch

    from ._naive import TensorSet

    theta_key = "theta.value"
    out = {}
    for key, value in arrays.items():
        value = (
            estimator._binding.columns.to_latent(value) if key == theta_key else np.asarray(value)
        )
        out[key] = torch.as_tensor(np.ascontiguousarray(value), dtype=torch.float64).to(device)
    return TensorSet(out)


class Appender:
    """A named thread calling ``append()`` every ``interval`` seconds until :meth:`stop`.

    Args:
        append: appends one pre-simulated block to the store (blocking until stored).
        interval: seconds between the starts of two appends.

    :meth:`pause` and :meth:`resume` stop and restart the appends (for interleaved baseline
    rounds); the thread's exception, if any, is re-raised by :meth:`stop`.
    """

    def __init__(self, append: Callable[[], None], interval: float = RESIMULATION_05[1]):
        self._append, self._interval = append, float(interval)
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._lock = threading.Lock()  # held while an append runs
        self._error: BaseException | None = None
        self.count = 0
        self._thread = threading.Thread(
            target=self._run, name="kestrel-bench-appender", daemon=True
        )

    def start(self) -> Appender:
        """Start appending; returns ``self``."""
        self._thread.start()
        return self

    def _run(self) -> None:
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                if not self._running.is_set():
                    self._running.wait(0.05)
                    next_at = time.monotonic()
                    continue
                with self._lock:
                    if self._running.is_set():
                        self._append()
                        self.count += 1
                next_at += self._interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as err:  # re-raised on the benchmark's thread by stop()
            self._error = err

    def pause(self) -> None:
        """Stop appending; returns once no append is running."""
        self._running.clear()
        with self._lock:
            pass

    def resume(self) -> None:
        """Append again, starting now."""
        self._running.set()

    def stop(self) -> int:
        """Stop, join, re-raise the thread's exception; returns the number of appends."""
        self._stop.set()
        self._running.set()
        self._thread.join(30)
        if self._error is not None:
            raise self._error
        return self.count
