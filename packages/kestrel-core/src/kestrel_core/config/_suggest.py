"""Spelling suggestions and key paths for error messages.

Every error about a user-supplied name (config key, node name, keyword argument) ends with a
"did you mean …?" hint when a close match exists, found with :mod:`difflib`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean", "key_path", "unknown"]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest candidate, or ``""`` if none is close.

    Example:
        >>> did_you_mean("max_sample", ["min_samples", "max_samples"])
        " (did you mean 'max_samples'?)"
        >>> did_you_mean("zzz", ["theta"])
        ''
    """
    pool = [str(c) for c in candidates]
    match = difflib.get_close_matches(str(word), pool, n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in pool}
        if str(word).lower() in lowered:
            match = [lowered[str(word).lower()]]
    return f" (did you mean {match[0]!r}?)" if match else ""


def unknown(what: str, word: str, candidates: Iterable[str]) -> str:
    """Message ``"unknown <what> 'word' (did you mean …?)"``, listing the choices when none is close.

    Example:
        >>> unknown("key", "num_gpu", ["num_cpus", "num_gpus"])
        "unknown key 'num_gpu' (did you mean 'num_gpus'?)"
    """
    pool = sorted(str(c) for c in candidates)
    hint = did_you_mean(word, pool)
    if not hint:
        hint = f" (expected one of: {', '.join(pool)})" if pool else ""
    return f"unknown {what} {word!r}{hint}"


def key_path(*parts: str | int) -> str:
    """Join key parts to a dotted key path; ints become list indices.

    Example:
        >>> key_path("graph", "x", "parents", 0)
        'graph.x.parents[0]'
    """
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "":
            out += f".{part}" if out else str(part)
    return out
