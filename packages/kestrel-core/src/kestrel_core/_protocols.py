"""Protocols through which the layers meet at run time.

kestrel-ray and kestrel-torch never import each other; they meet through these contracts:

* :class:`Simulator` — user forward models and priors (inner layer, numpy only).
* :class:`SampleStore` — the training buffer: blocks of rows addressed by sample id.
* :class:`BufferView` — what an estimator trains from: a thread-safe, blocking ``fetch`` that
  checks out, reads and releases in one call and returns plain numpy arrays.
* :class:`Estimator` — a trainable conditional density for one latent node.

Shape symbols: N samples in a call, M sample ids in a store, D a node's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Simulator",
    "Record",
    "BlockRead",
    "Checkout",
    "Fetch",
    "SampleStore",
    "BufferView",
    "EstimatorContext",
    "Estimator",
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
    ``np.broadcast_to`` view). Root nodes get no positional arguments. If the method accepts a
    keyword argument ``rng``, Kestrel passes a ``numpy.random.Generator`` spawned from the run's
    ``SeedSequence`` for that chunk, which makes runs reproducible bit for bit.
    """


@dataclass(frozen=True)
class BlockRead:
    """Rows to read from one stored block.

    Attributes:
        block: store-specific handle of the block: ``{flat_key: ndarray (n_block, *D)}`` in the
            in-memory store, ``{flat_key: ObjectRef}`` in the Ray store.
        rows: int64 array, shape ``(k,)``: rows of the block, aligned with ``ids``.
        ids: int64 array, shape ``(k,)``: the sample ids those rows hold.
    """

    block: Any
    rows: np.ndarray
    ids: np.ndarray


@dataclass(frozen=True)
class Checkout:
    """Result of :meth:`SampleStore.checkout`; hold it until :meth:`SampleStore.release`.

    Attributes:
        token: identifies this checkout; pass it to ``release``.
        active_ids: int64 ``(A,)``: every id currently in the requested statuses (or a random
            subset of ``max_samples`` of them), ascending.
        new_ids: int64 ``(K,)``: the active ids not in ``held_ids``, in the order the ``reads``
            produce them (concatenating ``reads[i].ids`` gives ``new_ids``).
        reads: the blocks and rows holding ``new_ids``; each block is pinned (not released by
            the store) until this checkout is released.
    """

    token: int
    active_ids: np.ndarray
    new_ids: np.ndarray
    reads: list[BlockRead] = field(default_factory=list)


class SampleStore(Protocol):
    """The training buffer contract (in-memory store and Ray store actor).

    Blocks are appended whole; each row becomes one sample with a new, never reused id. The
    statuses follow :func:`kestrel_core.rotate` after every append. One key schema per store:
    the first append fixes the set of flat keys and each key's per-sample shape; later appends
    that differ raise :class:`~kestrel_core.StoreError` and store nothing.
    """

    def append(self, block: Mapping[str, Any], n: int) -> np.ndarray:
        """Append a block of ``n`` rows; return the new ids (int64 ``(n,)``)."""
        ...

    def checkout(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Checkout:
        """Pin and return the blocks needed to read the active ids the caller does not hold.

        Raises:
            StoreError: a key is not in the store's schema (message lists the known keys).
        """
        ...

    def release(self, token: int) -> None:
        """End a checkout; blocks whose rows are all dead and unpinned are dropped."""
        ...

    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED; other statuses are left unchanged. Returns how many moved."""
        ...

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Statuses (int8) of ``ids``."""
        ...

    def stats(self) -> dict[str, int]:
        """Counts: ``validation training disfavoured tombstone deleted total blocks``."""
        ...


@dataclass(frozen=True)
class Fetch:
    """What :meth:`BufferView.fetch` returns.

    Attributes:
        active_ids: int64 ``(A,)``: ids currently in the requested statuses.
        new_ids: int64 ``(K,)``: active ids not in ``held_ids``, aligned with ``arrays`` rows.
        arrays: flat key → ndarray ``(K, *D)``; may be read-only, never aliases data a caller
            could corrupt in the store.
    """

    active_ids: np.ndarray
    new_ids: np.ndarray
    arrays: dict[str, np.ndarray]


class BufferView(Protocol):
    """What an estimator's loader reads from; every method is safe to call from any thread."""

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
        """Checkout, read the new rows with batched reads, release. Blocking."""
        ...

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED (may return before the store applied it)."""
        ...

    def stats(self) -> dict[str, int]:
        """The store's counts (see :meth:`SampleStore.stats`)."""
        ...


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


class Estimator(Protocol):
    """A trainable conditional density for one latent node.

    Built as ``cls(**config_kwargs)`` then :meth:`setup`. Sampling methods return a
    :data:`Record` ``{"value": float64 (n, D), "log_prob": float64 (n,)}`` where ``log_prob`` is
    the density of the drawn value under the distribution it was drawn from. ``conditions``
    maps node names to arrays of leading dimension ``n`` or ``1`` (broadcast).
    """

    def setup(self, context: EstimatorContext) -> None: ...

    async def train(self, view: BufferView) -> None:
        """Train until stopped; yields to the event loop between steps."""
        ...

    def sample_prior(self, n: int) -> Record: ...

    def sample_posterior(self, n: int, conditions: Mapping[str, np.ndarray]) -> Record: ...

    def sample_proposal(self, n: int, conditions: Mapping[str, np.ndarray]) -> Record: ...

    def save(self, directory: str) -> None: ...

    def load(self, directory: str) -> None: ...

    def request_stop(self) -> None: ...

    def status(self) -> dict[str, Any]:
        """Progress: ``epoch``, ``max_epochs``, ``train_loss``, ``val_loss``, ``samples_seen``, ``state``."""
        ...
