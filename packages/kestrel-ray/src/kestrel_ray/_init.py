"""Starting or joining Ray, quietly and once."""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["init_ray"]


def init_ray(address: str | None = None, **kwargs: Any) -> Any:
    """Start a local Ray (embedded in this process) or join a cluster; idempotent.

    ``address`` (or the ``RAY_ADDRESS`` environment variable) joins an existing cluster; without
    either, a local Ray starts without dashboard and with Ray's own logging at WARNING. Usage
    statistics are switched off (``RAY_USAGE_STATS_ENABLED=0``) unless the environment already
    says otherwise. If Ray is already initialised in this process, nothing happens (a second
    ``launch`` in the same process reuses it).

    Args:
        address: ``"auto"``, ``"ray://host:port"`` or ``"host:port"`` of a running cluster.
        **kwargs: passed to ``ray.init`` (e.g. ``num_cpus=2``), over Kestrel's defaults.

    Returns:
        The ``ray.init`` context, or ``None`` when Ray was already running.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return None
    address = address or os.environ.get("RAY_ADDRESS") or None
    opts: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    if address is None:
        opts["include_dashboard"] = False
    opts.update(kwargs)
    return ray.init(address=address, **opts)
