"""The dict trace: records per node, flattened to flat keys ``"<node>.<field>"``.

A *record* is what one node produces for a batch of N samples::

    {"value": array (N, ...), "log_prob": array (N,)}   # estimators / priors with density
    {"value": array (N, ...)}                           # simulators

A *trace* is the records of all nodes for the same N samples, flattened to flat keys such as
``"theta.value"``, ``"theta.log_prob"``, ``"x.value"``. Flat keys are built and parsed only by
:func:`flat_key` and :func:`split_key`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core._errors import GraphError, ShapeError

__all__ = ["flat_key", "split_key", "flatten", "unflatten", "format_shapes", "check_trace"]

VALUE = "value"
LOG_PROB = "log_prob"


def flat_key(node: str, field: str = VALUE) -> str:
    """Build the flat key of ``field`` of ``node``.

    Args:
        node: node name, an identifier without dots.
        field: record field, ``"value"`` or ``"log_prob"``.

    Returns:
        ``"<node>.<field>"``.

    Raises:
        GraphError: the node name contains a dot or is empty.

    Example:
        >>> flat_key("theta", "log_prob")
        'theta.log_prob'
    """
    if not node or "." in node:
        raise GraphError(f"node name {node!r} must be non-empty and contain no '.'")
    if not field or "." in field:
        raise GraphError(f"record field {field!r} of node {node!r} must contain no '.'")
    return f"{node}.{field}"


def split_key(key: str) -> tuple[str, str]:
    """Parse a flat key into ``(node, field)``.

    Raises:
        GraphError: ``key`` is not of the form ``"<node>.<field>"``.

    Example:
        >>> split_key("x.value")
        ('x', 'value')
    """
    node, sep, field = key.rpartition(".")
    if not sep or not node or not field or "." in node:
        raise GraphError(f"flat key {key!r} is not of the form '<node>.<field>'")
    return node, field


def flatten(records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Flatten ``{node: {field: array}}`` to ``{"node.field": array}`` (arrays are not copied)."""
    return {flat_key(node, f): arr for node, rec in records.items() for f, arr in rec.items()}


def unflatten(trace: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Inverse of :func:`flatten`: ``{"node.field": a}`` → ``{node: {field: a}}``."""
    out: dict[str, dict[str, Any]] = {}
    for key, arr in trace.items():
        node, field = split_key(key)
        out.setdefault(node, {})[field] = arr
    return out


def format_shapes(trace: Mapping[str, Any], title: str = "trace shapes") -> str:
    """Render a table of every key's shape and dtype, for error messages.

    Example:
        >>> import numpy as np
        >>> print(format_shapes({"theta.value": np.zeros((4, 2))}))
        trace shapes:
          key          shape   dtype
          theta.value  (4, 2)  float64
    """
    rows = [("key", "shape", "dtype")]
    for key, arr in trace.items():
        shape = getattr(arr, "shape", None)
        dtype = getattr(arr, "dtype", type(arr).__name__)
        rows.append((key, str(tuple(shape)) if shape is not None else "-", str(dtype)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{title}:"]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def check_trace(trace: Mapping[str, Any], n: int | None = None) -> int:
    """Check that every array of ``trace`` has the same leading dimension.

    Args:
        trace: flat key → array with leading batch axis.
        n: expected leading dimension, or ``None`` to take it from the first key.

    Returns:
        The common leading dimension N.

    Raises:
        ShapeError: a key's leading dimension differs (message includes the shape table), or a
            ``log_prob`` key is not of shape ``(N,)``.
    """
    for key, arr in trace.items():
        shape = np.shape(arr)
        if not shape:
            raise ShapeError(f"key {key!r} has no batch axis (shape ())\n" + format_shapes(trace))
        if n is None:
            n = shape[0]
        if shape[0] != n:
            raise ShapeError(
                f"key {key!r} has leading dimension {shape[0]}, expected {n}\n"
                + format_shapes(trace)
            )
        if key.endswith("." + LOG_PROB) and len(shape) != 1:
            raise ShapeError(
                f"key {key!r} has shape {shape}, expected ({n},)\n" + format_shapes(trace)
            )
    return 0 if n is None else int(n)
