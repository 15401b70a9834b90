"""Protocols through which the layers meet at run time.

kestrel-ray and kestrel-torch never import each other; they meet through these contracts:

* :class:`Simulator` — user forward models and priors (inner layer, numpy only).
* :class:`SampleStore`, :class:`BlockMeta`, :class:`BufferView` and their records — the
  training buffer; defined with the store in :mod:`kestrel_core.store._protocol` and
  re-exported here.
* :class:`Estimator` — a trainable conditional density for one latent node.
* :class:`GraphRunner` — an executor of a graph's plans (on Ray: ``kestrel_ray.DeployedGraph``;
  in one process: the application's ``LocalGraph``), as the application drives either.

Shape symbols: N samples in a call, M sample ids in a store, D a node's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from kestrel_core.store._protocol import (
    BlockMeta,
    BlockRead,
    BufferView,
    Checkout,
    Fetch,
    SampleStore,
)

if TYPE_CHECKING:
    from kestrel_core.graph._graph import Graph

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
    "GraphRunner",
    "ESTIMATOR_FILE",
    "OBSERVATION_CHECKS",
    "observation_checks",
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
#: the :meth:`Estimator.status` entry listing what the guards of its latest draw found about
#: the observation (JSON-ready dicts with ``node`` and ``kind``); optional
OBSERVATION_CHECKS = "observation_checks"


def observation_checks(estimator: Any) -> list[dict[str, Any]]:
    """What an estimator's guards found at its latest draw: the ``observation_checks`` entry of
    its ``status()`` (mappings only, copied); ``[]`` where it reports none or its status fails —
    the findings are a report, never a reason to fail a sampling call."""
    try:
        checks = (estimator.status() or {}).get(OBSERVATION_CHECKS)
    except Exception:
        return []
    return [dict(c) for c in checks or () if isinstance(c, Mapping)]


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

    An estimator class may set ``proposal_rows = False``: it trains without a proposal
    correction, so rows drawn from proposals (each with its ``log_prob``) would bias it; a
    launch that reuses another run's rows then gives it the prior's rows only (default, when
    absent: it trains on rows of any proposal, as a buffer mixing rounds holds them).
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
        """Progress: ``epoch``, ``max_epochs``, ``train_loss``, ``val_loss``, ``samples_seen``,
        ``state``; optionally :data:`OBSERVATION_CHECKS` (what the latest draw found about its
        observation — read after each sampling call and returned with its trace)."""
        ...


@runtime_checkable
class GraphRunner(Protocol):
    """An executor of one graph's plans: what the application calls on either executor.

    Two implement it: ``kestrel_ray.DeployedGraph`` (on Ray actors; its traces hold ObjectRefs
    only, a ``kestrel_ray.RefTrace``) and the application's in-process ``LocalGraph`` (its
    traces hold arrays). Both run the plans of :mod:`kestrel_core.execute._plan` on the same
    chunk grid with the same random streams, so a seed gives the same draws on either.

    A *trace* is what a sampling call returns (typed ``Any``: a ref trace or an array trace);
    every trace has ``n`` (int N), ``nodes()`` (the node names it holds, in call order) and the
    ``on_error: skip`` counts ``errors`` (node → int), ``error`` (node → ``(user frames,
    traceback)``) and ``raised`` (node → bool ``(N,)``), and ``findings`` (estimator node →
    what its observation guards found at the call's draws: the estimator's
    :data:`OBSERVATION_CHECKS` after it drew; nodes that found nothing are left out). Read its
    arrays with :meth:`to_arrays`.

    Shape symbols: N samples of a call, D a node's per-sample shape, D_key a flat key's.
    ``observations`` map observed node → ``x_o`` of shape ``D`` (no batch axis), over the
    graph's own.
    """

    @property
    def graph(self) -> Graph:
        """The validated graph whose plans this runner executes."""
        ...

    def sample(self, n: int) -> Any:
        """Forward-simulate every node (latent roots from their priors): a trace of N samples
        with every node's keys."""
        ...

    def sample_posterior(self, n: int, observations: Mapping[str, Any] | None = None) -> Any:
        """Posterior draws of the latent nodes (inference order) given the observations."""
        ...

    def sample_proposal(self, n: int, observations: Mapping[str, Any] | None = None) -> Any:
        """Proposal draws of the latent nodes (inference order) given the observations."""
        ...

    def sample_ppd(self, n: int, observations: Mapping[str, Any] | None = None) -> Any:
        """Posterior predictive: latents from the posterior, every other node simulated from
        them."""
        ...

    def run(
        self,
        n: int,
        plan: Sequence[tuple[str, str]],
        observations: Mapping[str, Any] | None = None,
        *,
        rows: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call ``(node, method)`` in order, each conditioned on the values known so far.

        Args:
            n: number of samples N. plan: the calls. observations: as above. rows: node →
                array ``(N, *D)``, a value per sample (e.g. m observations, each repeated for
                its draws), over ``observations``.

        Returns:
            A trace of the planned nodes' keys (none for N = 0).
        """
        ...

    def to_arrays(self, trace: Any, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """flat key → array ``(N, *D_key)`` of a trace this runner returned (may be read-only)."""
        ...

    def status(self, timeout: float = 2.0) -> dict[str, Any]:
        """node → its status dict (a list of them for a node served by several actors), whose
        ``"estimator"`` entry is the estimator's :meth:`Estimator.status`, where it has one."""
        ...
