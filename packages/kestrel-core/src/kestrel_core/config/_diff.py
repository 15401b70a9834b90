"""Differences between two configs as dotted key paths (``graph.x.simulator.sigma``).

Used by ``kestrel launch`` on an existing run: a config that differs from the run's own
``config.yml`` is named key by key (old → new) instead of being used or ignored silently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Change", "MISSING", "config_changes", "describe_changes", "array_digest", "text_digest"]


class _Missing:
    """A key that one side does not have."""

    def __repr__(self) -> str:
        return "(absent)"


#: the value of a key one config does not have
MISSING: Any = _Missing()


@dataclass(frozen=True)
class Change:
    """One key whose value differs.

    Attributes:
        key: dotted key path (``graph.x.simulator.sigma``; list items as ``key[0]``).
        old: the value in the first config (:data:`MISSING` when absent there).
        new: the value in the second config (:data:`MISSING` when absent there).
    """

    key: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.key}: {_show(self.old)} → {_show(self.new)}"


def _show(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    if getattr(value, "whole", False):  # shown in full (e.g. a file path)
        return str(value)
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _matches(key: str, patterns: Sequence[str]) -> bool:
    """Whether ``key`` matches one of ``patterns`` (dotted, ``*`` = one whole segment)."""
    parts = key.split(".")
    for pattern in patterns:
        want = pattern.split(".")
        if len(want) == len(parts) and all(w in ("*", p) for w, p in zip(want, parts)):
            return True
    return False


def config_changes(
    old: Any, new: Any, *, ignore: Sequence[str] = (), prefix: str = ""
) -> list[Change]:
    """The keys whose values differ between two plain-container configs, in key order.

    Mappings are compared key by key (a key on one side only is a change with
    :data:`MISSING` on the other), lists of equal length item by item, anything else by
    ``==`` (so ``1`` equals ``1.0``).

    Args:
        old, new: nested dicts / lists / scalars (e.g. :meth:`RunConfig.to_dict`).
        ignore: dotted key paths left out, ``*`` standing for one segment
            (``"graph.*.observed"``).
        prefix: the key path of ``old``/``new`` themselves (for the recursion).

    Returns:
        One :class:`Change` per differing leaf (or per list whose length changed).

    Example:
        >>> [str(c) for c in config_changes({"a": {"b": 1, "c": 2}}, {"a": {"b": 3, "c": 2}})]
        ['a.b: 1 → 3']
    """
    if prefix and _matches(prefix, ignore):
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = list(old) + [k for k in new if k not in old]
        out: list[Change] = []
        for key in keys:
            path = f"{prefix}.{key}" if prefix else str(key)
            out += config_changes(
                old.get(key, MISSING), new.get(key, MISSING), ignore=ignore, prefix=path
            )
        return out
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += config_changes(a, b, ignore=ignore, prefix=f"{prefix}[{i}]")
        return out
    if old is MISSING or new is MISSING:
        return [] if old is new else [Change(prefix, old, new)]
    if type(old) is not type(new) and not _both_numbers(old, new):
        return [Change(prefix, old, new)]
    return [] if old == new else [Change(prefix, old, new)]


def _both_numbers(a: Any, b: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))


def describe_changes(changes: Sequence[Change], limit: int = 8) -> str:
    """``"a.b: 1 → 3; c: 'x' → 'y'"`` (at most ``limit`` changes, then ``"and 3 more"``)."""
    shown = "; ".join(str(c) for c in changes[:limit])
    rest = len(changes) - limit
    return shown + (f"; and {rest} more" if rest > 0 else "")


def text_digest(text: str) -> str:
    """The sha256 hex digest of ``text`` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def array_digest(array: Any) -> str:
    """The sha256 hex digest of an array's dtype, shape and values (C order).

    Example:
        >>> array_digest(np.zeros(3)) == array_digest(np.zeros(3, order="F"))
        True
    """
    arr = np.ascontiguousarray(array)
    h = hashlib.sha256(f"{arr.dtype.str}{tuple(arr.shape)}".encode())
    h.update(arr.tobytes())
    return h.hexdigest()
