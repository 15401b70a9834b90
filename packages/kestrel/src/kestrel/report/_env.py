"""Durations the user may set in the environment (``KESTREL_STOP_GRACE`` and the like)."""

from __future__ import annotations

import os

__all__ = ["env_seconds"]


def env_seconds(name: str, default: float, least: float = 0.0) -> float:
    """Seconds from the environment variable ``name``: ``default`` when it is unset or not a
    number, and at least ``least``."""
    try:
        return max(least, float(os.environ.get(name, default)))
    except ValueError:
        return default
