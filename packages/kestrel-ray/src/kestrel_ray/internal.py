"""The semi-public room of kestrel-ray: what the ``kestrel`` application builds on.

These names are not part of kestrel-ray's public API (:mod:`kestrel_ray`) and may change with
any release; the application imports them from here, never from a private module (as
``equinox.internal``). Each name is imported on first use (PEP 562), so importing this module
does not import ray.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kestrel_ray._errors import describe_failure, unwrap_error
    from kestrel_ray.cluster._imports import SHIPPED_FROM_VAR
    from kestrel_ray.cluster._resources import actor_options
    from kestrel_ray.cluster._start import check_address_format
    from kestrel_ray.graph._actors import check_graph_config
    from kestrel_ray.graph._auto import AutoActors, resolve_auto_actors
    from kestrel_ray.node._chunks import rows_of, spans
    from kestrel_ray.node._handles import SubmittedTrace
    from kestrel_ray.node._timeout import actor_info, actor_infos
    from kestrel_ray.store._snapshot import restore_store, snapshot_store

#: name → the module that defines it
_HOMES = {
    "describe_failure": "kestrel_ray._errors",
    "unwrap_error": "kestrel_ray._errors",
    "SHIPPED_FROM_VAR": "kestrel_ray.cluster._imports",
    "actor_options": "kestrel_ray.cluster._resources",
    "check_address_format": "kestrel_ray.cluster._start",
    "check_graph_config": "kestrel_ray.graph._actors",
    "AutoActors": "kestrel_ray.graph._auto",
    "resolve_auto_actors": "kestrel_ray.graph._auto",
    "rows_of": "kestrel_ray.node._chunks",
    "spans": "kestrel_ray.node._chunks",
    "SubmittedTrace": "kestrel_ray.node._handles",
    "actor_info": "kestrel_ray.node._timeout",
    "actor_infos": "kestrel_ray.node._timeout",
    "restore_store": "kestrel_ray.store._snapshot",
    "snapshot_store": "kestrel_ray.store._snapshot",
}
__all__ = [
    "AutoActors",
    "SHIPPED_FROM_VAR",
    "SubmittedTrace",
    "actor_info",
    "actor_infos",
    "actor_options",
    "check_address_format",
    "check_graph_config",
    "describe_failure",
    "resolve_auto_actors",
    "restore_store",
    "rows_of",
    "snapshot_store",
    "spans",
    "unwrap_error",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kestrel_ray.internal' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
