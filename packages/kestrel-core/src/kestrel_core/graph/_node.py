"""``Node``: one random variable, and the checks of its fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError
from kestrel_core.config._suggest import did_you_mean, key_path, unknown
from kestrel_core.graph._spec import Spec, plain

__all__ = [
    "Node",
    "RAY_OPTIONS",
    "ON_ERROR",
    "ray_options",
    "name_tuple",
    "count",
    "choice",
    "flag",
    "seconds",
]

#: what a node does when its simulator raises for some samples (``on_error``)
ON_ERROR = ("raise", "skip")

#: actor options a node's ``ray`` mapping may hold (passed to ``.options()`` of its actors)
RAY_OPTIONS = (
    "num_cpus",
    "num_gpus",
    "memory",
    "resources",
    "runtime_env",
    "scheduling_strategy",
    "max_concurrency",
    "max_restarts",
    "max_task_retries",
    "accelerator_type",
    "label_selector",
)


@dataclass(frozen=True, eq=False)
class Node:
    """One random variable of the graph.

    Attributes:
        name: identifier without dots; flat keys are ``f"{name}.value"`` etc.
        simulator: builds the forward model (for a latent root node: its prior).
        estimator: builds the node's posterior estimator, or ``None``.
        parents: forward inputs, passed positionally to the simulator in this order.
        evidence: nodes the estimator conditions on.
        scaffolds: training-only condition nodes.
        observed: the observation ``x_o``, shape ``D`` (no batch axis), read-only; or ``None``.
        num_actors: simulator replicas (Ray layer), ≥ 1 (with :attr:`auto_actors`: 1 until
            the Ray layer resolves it).
        auto_actors: ``num_actors: auto`` — the Ray layer gives the node one replica per slot
            of what a replica requests over the cluster's nodes, and follows nodes that join
            or leave (:mod:`kestrel_ray.graph._auto`).
        sample_chunk_size: most samples per simulator call, ``0`` = all at once.
        ray: Ray actor options (keys from :data:`RAY_OPTIONS`).
        on_error: ``"raise"`` (a simulator exception stops the run) or ``"skip"`` (the samples
            whose simulation raised are counted and kept out of training, like non-finite
            ones); see :data:`ON_ERROR`.
        dry_run: simulate this node on a few prior draws in-process before a launch starts
            Ray (``False`` for a simulator too expensive for that; its descendants are then
            not dry-run either).
        timeout: seconds one simulator call (one chunk of ``sample_chunk_size`` rows) may take
            on Ray; a chunk still running then is retried once on a restarted actor, then
            fails naming the node and the chunk. ``None``: no limit.
        names: names of the node's ``prod(D)`` flattened components (plots, exports), or
            ``()``; see :mod:`kestrel_core.graph._names`.
    """

    name: str
    simulator: Spec
    estimator: Spec | None = None
    parents: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    scaffolds: tuple[str, ...] = ()
    observed: np.ndarray | None = None
    num_actors: int = 1
    sample_chunk_size: int = 0
    ray: dict[str, Any] = field(default_factory=dict)
    on_error: str = "raise"
    dry_run: bool = True
    timeout: float | None = None
    names: tuple[str, ...] = ()
    auto_actors: bool = False

    @property
    def is_latent(self) -> bool:
        """Whether the node has an estimator."""
        return self.estimator is not None


def name_tuple(value: Any, where: str) -> tuple[str, ...]:
    value = plain(value)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)):
        raise ConfigError(
            f"{where}: expected a list of node names, found {type(value).__name__} {value!r}"
        )
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ConfigError(
                f"{key_path(where, i)}: expected a node name, found {type(item).__name__} {item!r}"
            )
    return tuple(value)


def count(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ConfigError(f"{where}: expected an integer ≥ {minimum}, found {value!r}")
    return int(value)


def choice(value: Any, where: str, allowed: tuple[str, ...]) -> str:
    """Check a value that must be one of ``allowed`` strings.

    Raises:
        ConfigError: naming the key path, the value found and the allowed ones.
    """
    if not isinstance(value, str) or value not in allowed:
        hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
        raise ConfigError(f"{where}: expected {' | '.join(allowed)}, found {value!r}{hint}")
    return value


def seconds(value: Any, where: str) -> float | None:
    """Check a duration in seconds: a positive finite number, or ``None`` (no limit).

    Raises:
        ConfigError: not a positive finite number.
    """
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not np.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"{where}: expected a number of seconds > 0, found {value!r}")
    return float(value)


def flag(value: Any, where: str) -> bool:
    """Check a ``true``/``false`` value.

    Raises:
        ConfigError: not a bool.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{where}: expected true or false, found {value!r}")
    return bool(value)


def ray_options(value: Any, where: str) -> dict[str, Any]:
    """Check a node's ``ray`` actor options against :data:`RAY_OPTIONS`.

    Raises:
        ConfigError: not a mapping, or an unknown option (``num_gpu`` → did you mean
            ``num_gpus``?).
    """
    value = plain(value)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping of Ray actor options, found {value!r}")
    for key in value:
        if key not in RAY_OPTIONS:
            raise ConfigError(
                f"{key_path(where, key)}: {unknown('Ray actor option', key, RAY_OPTIONS)}"
            )
    return dict(value)
