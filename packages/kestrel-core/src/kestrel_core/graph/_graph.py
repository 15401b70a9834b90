"""The graph of random variables: :class:`Node`, :class:`Graph` (and :class:`Spec`).

A graph is built from YAML by :func:`~kestrel_core.load_config` or in Python::

    g = (Graph()
         .add_node("theta", Spec("kestrel_core.Product", {"priors": [["normal", 0, 1]]}),
                   estimator="kestrel_torch.GaussianPosterior", evidence=["x"])
         .add_node("x", "model.Noise", parents=["theta"], observed="data/obs.npy"))
    g.validate()

Shape symbols: N samples, D a node's per-sample shape.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

import kestrel_core.graph._topology as _topology
from kestrel_core._errors import ConfigError, GraphError
from kestrel_core.config._suggest import key_path, unknown
from kestrel_core.graph._names import node_names
from kestrel_core.graph._node import (
    ON_ERROR,
    RAY_OPTIONS,
    Node,
    choice,
    count,
    flag,
    name_tuple,
    ray_options,
    seconds,
)
from kestrel_core.graph._observe import check_observation, load_observation
from kestrel_core.graph._spec import Spec

__all__ = ["Graph", "Node", "Spec", "RAY_OPTIONS"]


class Graph:
    """A mutable builder of nodes; validated by :meth:`validate` (and by ``load_config``).

    Args:
        base_dir: directory that relative ``observed`` paths are resolved against (default:
            the current directory at :meth:`add_node` time).
    """

    def __init__(self, base_dir: str | os.PathLike[str] | None = None) -> None:
        self.base_dir = None if base_dir is None else os.fspath(base_dir)
        self._nodes: dict[str, Node] = {}

    def add_node(
        self,
        name: str,
        simulator: Any,
        *,
        estimator: Any = None,
        parents: Iterable[str] = (),
        evidence: Iterable[str] = (),
        scaffolds: Iterable[str] = (),
        observed: Any = None,
        num_actors: int = 1,
        sample_chunk_size: int = 0,
        ray: Mapping[str, Any] | None = None,
        on_error: str = "raise",
        dry_run: bool = True,
        timeout: float | None = None,
        names: Iterable[str] | None = None,
    ) -> Graph:
        """Add a node; returns the graph so calls chain.

        Args:
            name: identifier without dots.
            simulator: a :class:`Spec`, dotted path, ``{"_target_": …, **kwargs}`` mapping,
                class or live instance.
            estimator: the same forms as ``simulator``, or ``None``.
            parents, evidence, scaffolds: node names (checked by :meth:`validate`).
            observed: an array (shape ``D``) or a path spec ``"file.npz['key']"``.
            num_actors: ≥ 1. sample_chunk_size: ≥ 0 (0 = one call for all samples).
            ray: Ray actor options, keys from :data:`RAY_OPTIONS`.
            on_error: ``"raise"`` or ``"skip"`` (samples whose simulation raised are dropped).
            dry_run: simulate the node in-process before a launch starts Ray (default true).
            timeout: seconds one simulator call (one chunk) may take on Ray (``None``: no
                limit); see :class:`Node`.
            names: names of the node's flattened components (``[beta, gamma]``); their number
                must match the node's dimension where it is known here (the observation's
                size, or a kestrel-core prior's), and is checked again against samples.

        Raises:
            GraphError: the name is not an identifier or already used.
            ConfigError: a field has the wrong type or value, or the observation cannot be
                loaded (messages start with ``graph.<name>.<field>``).
        """
        if not _topology.is_identifier_name(name):
            raise GraphError(
                f"{key_path('graph', str(name))}: node name {name!r} must be an identifier "
                "(letters, digits, '_'; no '.')"
            )
        if name in self._nodes:
            raise GraphError(f"graph.{name}: node {name!r} is already in the graph")
        where = f"graph.{name}"
        obs = None
        if observed is not None:
            base = self.base_dir if self.base_dir is not None else os.getcwd()
            try:
                obs = load_observation(observed, base, node=name)
            except ConfigError as err:
                raise ConfigError(f"{where}.observed: {err}") from err
        node = Node(
            name=name,
            simulator=Spec.coerce(simulator, f"{where}.simulator"),
            estimator=None if estimator is None else Spec.coerce(estimator, f"{where}.estimator"),
            parents=name_tuple(parents, f"{where}.parents"),
            evidence=name_tuple(evidence, f"{where}.evidence"),
            scaffolds=name_tuple(scaffolds, f"{where}.scaffolds"),
            observed=obs,
            num_actors=count(num_actors, f"{where}.num_actors", 1),
            sample_chunk_size=count(sample_chunk_size, f"{where}.sample_chunk_size", 0),
            ray=ray_options(ray, f"{where}.ray"),
            on_error=choice(on_error, f"{where}.on_error", ON_ERROR),
            dry_run=flag(dry_run, f"{where}.dry_run"),
            timeout=seconds(timeout, f"{where}.timeout"),
            names=node_names(names, f"{where}.names", simulator, obs),
        )
        self._nodes[name] = node
        return self

    def validate(self) -> Graph:
        """Check references, cycles and node roles; returns the graph.

        Raises:
            GraphError: listing every problem, one per line, each starting with its key path,
                e.g. ``graph.x.parents[0]: unknown node 'thta' (did you mean 'theta'?)``.
        """
        problems = _topology.structure_problems(self._nodes)
        if not self._nodes:
            problems.append("graph: no nodes")
        if problems:
            raise GraphError(_join(problems))
        return self

    @property
    def nodes(self) -> dict[str, Node]:
        """Nodes by name, in the order they were added (config order)."""
        return dict(self._nodes)

    @property
    def forward_order(self) -> list[str]:
        """Names in topological order of ``parents`` (ties in config order).

        Raises:
            GraphError: the parents form a cycle.
        """
        return _topology.forward_order(self._nodes)

    @property
    def inference_order(self) -> list[str]:
        """Observed nodes, then latents after their evidence, with deterministic intermediates
        between them (scaffolds are not inference dependencies).

        Raises:
            GraphError: a latent's evidence depends on the latent itself.
        """
        return _topology.inference_order(self._nodes)

    @property
    def latents(self) -> list[str]:
        """Names of the nodes with an estimator, in config order."""
        return [n for n, node in self._nodes.items() if node.estimator is not None]

    @property
    def observations(self) -> dict[str, np.ndarray]:
        """``{name: x_o}`` of the observed nodes; arrays of shape ``D``, read-only."""
        return {n: node.observed for n, node in self._nodes.items() if node.observed is not None}

    def fit_observation(self, name: str, sample_shape: Iterable[int]) -> np.ndarray:
        """Fit node ``name``'s observation to its per-sample shape ``D``, once it is known.

        The one rule of :func:`~kestrel_core.check_observation`: an observation of
        shape ``D`` is kept; one of shape ``(1, *D)`` is replaced by its only row, with a
        :class:`UserWarning` naming both shapes (so every later step — the observation saved
        in the run, the conditions of the estimators — sees ``D``, never ``(1, 1, *D)``);
        anything else is refused.

        Args:
            name: an observed node. sample_shape: ``D``, e.g. from a dry run's output.

        Returns:
            The node's observation, now of shape ``D``.

        Raises:
            ShapeError: several observations (``(k, *D)``, k > 1) or another shape; the message
                names the node and both shapes.
            GraphError: no such node, or it has no observation.
        """
        node = self[name]
        if node.observed is None:
            raise GraphError(f"graph.{name}: node {name!r} has no observation to fit")
        fitted = check_observation(name, node.observed, tuple(sample_shape))
        if fitted.shape != node.observed.shape:
            self._nodes[name] = dataclasses.replace(node, observed=fitted)
        return fitted

    def __getitem__(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise GraphError(unknown("node", name, self._nodes)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"Graph({', '.join(self._nodes)})"

    def describe(self) -> str:
        """Text of the graph: one line per node in forward order, then a summary line.

        Each line shows the edges ``parents → node``, ``(observed, shape D)``, the simulator
        target, ``← evidence`` and the estimator target. Example (05)::

            theta                        ~ kestrel_core.Product  ← x  [estimator kestrel_torch.GaussianPosterior; scaffolds mu]
            theta → mu                   ~ model.Signal
            mu → x  (observed (1000,))   ~ model.Noise
            Nodes: 3 | Observed: x | Estimators: theta

        Raises:
            GraphError: the parents form a cycle.
        """
        rows = []
        notes: list[str] = []
        for name in self.forward_order:
            node = self._nodes[name]
            left = f"{', '.join(node.parents)} → {name}" if node.parents else name
            if node.observed is not None:
                shape = tuple(node.observed.shape)
                left += f"  (observed {shape})"
                if len(shape) > 1 and shape[0] == 1:  # told now, settled by the dry run
                    notes.append(
                        f"note: node {name!r}: observation of shape {shape}; if its simulator's "
                        f"per-sample shape is {shape[1:]}, the leading axis of 1 is dropped "
                        "(with a warning) when the graph is first simulated (launch, simulate)"
                    )
            right = f"~ {node.simulator.target_name}"
            if node.evidence:
                right += f"  ← {', '.join(node.evidence)}"
            extra = []
            if node.estimator is not None:
                extra.append(f"estimator {node.estimator.target_name}")
            if node.scaffolds:
                extra.append(f"scaffolds {', '.join(node.scaffolds)}")
            if node.num_actors > 1:
                extra.append(f"{node.num_actors} actors")
            if extra:
                right += f"  [{'; '.join(extra)}]"
            rows.append((left, right))
        width = max((len(left) for left, _ in rows), default=0)
        lines = [f"{left.ljust(width)}  {right}" for left, right in rows]
        observed = ", ".join(self.observations) or "none"
        latents = ", ".join(self.latents) or "none"
        lines.append(f"Nodes: {len(self._nodes)} | Observed: {observed} | Estimators: {latents}")
        return "\n".join(lines + notes)


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems)
