"""The node option ``names``: names of a node's components, for plots and exports.

A node whose values have per-sample shape ``D`` may name its ``prod(D)`` flattened components
(``names: [beta, gamma]``); ``kestrel plot`` labels its axes with them and ``kestrel export``
uses them as coordinates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError
from kestrel_core.graph._spec import plain

__all__ = ["check_names", "check_names_size", "prior_size", "node_names"]


def check_names(value: Any, where: str) -> tuple[str, ...]:
    """Check a ``names`` value: a list of distinct, non-empty strings (``None``: no names).

    Args:
        value: the config value.
        where: its key path, e.g. ``"graph.theta.names"``.

    Returns:
        The names, a tuple (empty for ``None``).

    Raises:
        ConfigError: not a list, an entry that is not a non-empty string, or a repeated name;
            the message starts with the key path.
    """
    value = plain(value)
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(
            f"{where}: expected a non-empty list of component names, e.g. [beta, gamma], "
            f"found {value!r}"
        )
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{where}[{i}]: expected a non-empty name, found {item!r}")
    seen: set[str] = set()
    for item in value:
        if item in seen:
            raise ConfigError(f"{where}: the name {item!r} is given twice")
        seen.add(item)
    return tuple(value)


def check_names_size(names: Any, size: int, where: str, source: str = "") -> None:
    """Check that ``names`` name exactly ``size`` components.

    Args:
        names: the checked names.
        size: the node's dimension, ``prod(D)``.
        where: key path of the names, e.g. ``"graph.theta.names"``.
        source: where the dimension was seen (a file, "its prior", "its observation").

    Raises:
        ConfigError: ``len(names) != size``, naming the node's key path, both numbers and the
            source.
    """
    if names and len(names) != size:
        seen = f" ({source})" if source else ""
        raise ConfigError(
            f"{where}: {len(names)} name{'s' if len(names) != 1 else ''} for {size} "
            f"component{'s' if size != 1 else ''}; the node has dimension {size}{seen}"
        )


def prior_size(simulator: Any) -> int | None:
    """The dimension of a node whose simulator is one of kestrel-core's priors, else ``None``.

    Builds the prior only when the spec names ``kestrel_core.Product`` or
    ``kestrel_core.MultivariateNormal`` (cheap, no user code); any other simulator's dimension
    is known only once it runs.
    """
    target = getattr(simulator, "target", None)
    name = target if isinstance(target, str) else getattr(simulator, "target_name", "")
    if not isinstance(name, str) or not name.startswith("kestrel_core."):
        return None
    try:
        prior = simulator.build()
    except Exception:  # the simulator's own checks report its errors where it is used
        return None
    size = getattr(prior, "full_dim", None)
    return int(size) if isinstance(size, int) else None


def node_names(value: Any, where: str, simulator: Any, observed: Any = None) -> tuple[str, ...]:
    """Check a node's ``names`` and, where the node's dimension is known before anything runs
    (its observation, or a kestrel-core prior), their number.

    Args:
        value: the ``names`` value.
        where: its key path, e.g. ``"graph.theta.names"``.
        simulator: the node's simulator (a :class:`~kestrel_core.Spec` or a config value).
        observed: the node's observation (shape ``D``) or ``None``.

    Raises:
        ConfigError: as :func:`check_names` and :func:`check_names_size`.
    """
    names = check_names(value, where)
    if not names:
        return names
    if observed is not None:
        check_names_size(names, int(np.size(observed)), where, "its observation")
        return names
    from kestrel_core.graph._spec import Spec

    try:
        spec = Spec.coerce(simulator, where)
    except ConfigError:
        return names  # the simulator's own key reports that
    size = prior_size(spec)
    if size is not None:
        check_names_size(names, size, where, f"its prior {spec.target_name}")
    return names
