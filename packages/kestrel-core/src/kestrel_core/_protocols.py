"""Protocols through which the layers meet at run time.

kestrel-ray and kestrel-torch never import each other; they meet through these contracts:

* :class:`Simulator` — user forward models and priors (inner layer, numpy only).
* :class:`SampleStore`, :class:`BlockMeta`, :class:`BufferView` and their records — the
  training buffer; defined with the store in :mod:`kestrel_core.store._protocol` and
  re-exported here.
* :class:`Estimator` — a trainable conditional density for one latent node.

Shape symbols: N samples in a call, M sample ids in a store, D a node's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kestrel_core.store._protocol import (
    BlockMeta,
    BlockRead,
    BufferView,
    Checkout,
    Fetch,
    SampleStore,
)

__all__ = [
    "Simulator",
    "Record",
    "BlockMeta",
    "BlockRead",
    "Checkout",
    "Fetch",
    "SampleStore",
    "BufferView",
    "EstimatorContext",
    "Estimator",
    "ESTIMATOR_FILE",
]

#: ``{"value": ndarray (N, *D), "log_prob": ndarray (N,)}``; simulators give ``value`` only.
Record = dict[str, np.ndarray]


@runtime_checkable
class Simulator(Protocol):
    """A node's forward model (or, for a latent root node, its prior).

    A simulator class takes its config kwargs in ``__init__`` and implements **one** of:

    * ``simulate_batch(n, *parents, rng=None) -> array (n, *D)`` — vectorised;
    * ``simulate(*parents, rng=None) -> array D`` — one sample; Kestrel stacks the results.

    ``parents`` are the parent nodes' values in the listed order, numpy arrays of shape
    ``(n, *D_parent)`` (read-only; a broadcast condition arrives as a read-only
    ``np.broadcast_to`` view). The inputs share memory with the stored samples and the
    observation, so a simulator must not change them: copy one first (``x = x.copy()``); a
    write into an input raises :class:`~kestrel_core.SimulatorError` (an ``InputWriteError``,
    also a ``ValueError``) naming the node, the input and this remedy. Root nodes get no
    positional arguments. If the method accepts a
    keyword argument ``rng``, Kestrel passes a ``numpy.random.Generator`` spawned from the run's
    ``SeedSequence`` for that chunk, which makes runs reproducible bit for bit.
    """


@dataclass(frozen=True)
class EstimatorContext:
    """What the framework tells an estimator about its node (see :meth:`Estimator.setup`).

    Attributes:
        node: the latent node's name (its flat keys are ``f"{node}.value"``/``.log_prob``).
        prior: the node's prior, a :class:`kestrel_core.Product` (the node's simulator).
        evidence: node names the posterior conditions on, in config order.
        scaffolds: training-only condition node names (``None`` at inference).
        seed: integer seed for the estimator's own randomness, or ``None``.
    """

    node: str
    prior: Any
    evidence: tuple[str, ...]
    scaffolds: tuple[str, ...] = ()
    seed: int | None = None


#: the file an estimator's :meth:`Estimator.save_bytes` is kept in, in its node's folder
ESTIMATOR_FILE = "estimator.pt"


class Estimator(Protocol):
    """A trainable conditional density for one latent node.

    Built as ``cls(**config_kwargs)`` then :meth:`setup`. Construction validates the keyword
    arguments and does nothing else (no model, device or data): the driver's preflight
    constructs each configured estimator once, so a bad option fails before any actor starts
    (``TypeError`` for an unknown keyword, :class:`ConfigError` for a bad value). Sampling
    methods return a :data:`Record` ``{"value": float64 (n, D), "log_prob": float64 (n,)}``
    where ``log_prob`` is the density of the drawn value under the distribution it was drawn
    from. ``conditions`` maps node names to arrays of leading dimension ``n`` or ``1``
    (broadcast). A sampling method that accepts a keyword argument ``rng`` is passed a
    ``numpy.random.Generator`` per chunk, spawned from the sampling call's seed, and must draw
    from it: an estimator's own seed fixes its training, not its draws.
    """

    def setup(self, context: EstimatorContext) -> None: ...

    async def train(self, view: BufferView) -> None:
        """Train until stopped; yields to the event loop between steps."""
        ...

    def sample_prior(self, n: int) -> Record: ...

    def sample_posterior(self, n: int, conditions: Mapping[str, np.ndarray]) -> Record: ...

    def sample_proposal(self, n: int, conditions: Mapping[str, np.ndarray]) -> Record: ...

    def save_bytes(self) -> bytes:
        """The estimator's whole state (weights, optimiser, epoch counter) as bytes.

        What a node actor sends to the driver, which writes ``<graph>/<node>/``:data:`ESTIMATOR_FILE`
        — an actor never writes into the run directory, which may be on another machine.
        Nothing in it may need unpickling to read back (``torch.load(weights_only=True)``).
        """
        ...

    def load_bytes(self, data: bytes, *, source: str = "checkpoint bytes") -> None:
        """Restore :meth:`save_bytes`' output (``source`` names it in error messages)."""
        ...

    def save(self, directory: str) -> None:
        """Write :meth:`save_bytes` to ``<directory>/``:data:`ESTIMATOR_FILE` (in-process use;
        node actors only ever call :meth:`save_bytes` / :meth:`load_bytes`)."""
        ...

    def load(self, directory: str) -> None:
        """Restore ``<directory>/``:data:`ESTIMATOR_FILE`."""
        ...

    def request_stop(self) -> None: ...

    def status(self) -> dict[str, Any]:
        """Progress: ``epoch``, ``max_epochs``, ``train_loss``, ``val_loss``, ``samples_seen``, ``state``."""
        ...
