"""Kestrel on Ray: the block-ref sample store, the NodeWrapper boundary, ref-only graphs.

Outer layer (refs only): :class:`DeployedGraph`, :class:`SampleStore`, :class:`RefTrace`.
Boundary (refs ↔ arrays, batched): :class:`NodeWrapper`, :class:`RayBufferView`.
Depends on kestrel-core and ray; never imports torch.
"""

from importlib import import_module
from typing import Any

from .__about__ import __version__

#: public name → the module that defines it; imported on first use (PEP 562), so that
#: ``import kestrel_ray`` — which every ``kestrel`` command does through the entry points —
#: does not import ray until a command needs it
_HOMES = {
    "init_ray": "._init",
    "DeployedGraph": "._deployed",
    "RefTrace": "._refs",
    "Column": "._refs",
    "chunk_grid": "._refs",
    "SampleStore": "._store",
    "create_store": "._store_handle",
    "StoreHandle": "._store_handle",
    "NodeWrapper": "._wrapper",
    "NodeHandle": "._handles",
    "MultiplexNodeWrapper": "._multiplex",
    "RayBufferView": "._view",
    # the main job: launch, sample, run directory
    "launch": ".run._launch",
    "RunResult": ".run._result",
    "RunError": "._errors",
    "sample_run": ".run._sampling",
    "SampleResult": ".run._sampling",
    "RunDir": ".run._rundir",
}
__all__ = ["__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kestrel_ray' has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
