"""Kestrel on Ray: the block-ref sample store, the NodeWrapper boundary, ref-only graphs.

Outer layer (refs only): :class:`DeployedGraph`, :class:`SampleStore`, :class:`RefTrace`.
Boundary (refs ↔ arrays, batched): :class:`NodeWrapper`, :class:`RayBufferView`.
Depends on kestrel-core and ray; never imports torch.
"""

import warnings
from importlib import import_module
from typing import Any

from kestrel_ray.__about__ import __version__

#: public name → the module that defines it; imported on first use (PEP 562), so that
#: ``import kestrel_ray`` does not import ray until a name that needs it is used
_HOMES = {
    "init_ray": "kestrel_ray.cluster._start",
    "DeployedGraph": "kestrel_ray.graph._deployed",
    "RefTrace": "kestrel_ray.graph._refs",
    "Column": "kestrel_ray.graph._refs",
    "chunk_grid": "kestrel_ray.graph._refs",
    "SampleStore": "kestrel_ray.store._actor",
    "create_store": "kestrel_ray.store._handle",
    "StoreHandle": "kestrel_ray.store._handle",
    "NodeWrapper": "kestrel_ray.node._wrapper",
    "NodeHandle": "kestrel_ray.node._handles",
    "MultiplexNodeWrapper": "kestrel_ray.node._multiplex",
    "RayBufferView": "kestrel_ray.store._view",
    "RunError": "kestrel_ray._errors",
}
#: the application's names that this package exported before the ``kestrel`` package held
#: them; kept for one release, with a DeprecationWarning, and looked up in :mod:`kestrel`
_MOVED = ("launch", "RunResult", "sample_run", "SampleResult", "RunDir")
__all__ = ["__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"kestrel_ray.{name} moved to kestrel.{name} (the application package); "
            "this alias goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(import_module("kestrel"), name)
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kestrel_ray' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
