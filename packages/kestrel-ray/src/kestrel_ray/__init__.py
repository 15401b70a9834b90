"""Kestrel on Ray: the block-ref sample store, the NodeWrapper boundary, ref-only graphs.

Outer layer (refs only): :class:`DeployedGraph`, :class:`SampleStore`, :class:`RefTrace`.
Boundary (refs ↔ arrays, batched): :class:`NodeWrapper`, :class:`RayBufferView`.
Depends on kestrel-core and ray; never imports torch.
"""

__all__ = [
    "__version__",
    "init_ray",
    "DeployedGraph",
    "RefTrace",
    "Column",
    "chunk_grid",
    "SampleStore",
    "create_store",
    "NodeWrapper",
    "NodeHandle",
    "MultiplexNodeWrapper",
    "RayBufferView",
    # the main job: launch, sample, run directory
    "launch",
    "RunResult",
    "RunError",
    "sample_run",
    "SampleResult",
    "RunDir",
]

from importlib import import_module
from typing import Any

from .__about__ import __version__

#: public name → the module that defines it; imported on first use (PEP 562), so that
#: ``import kestrel_ray`` — which every ``kestrel`` command does through the entry points —
#: does not import ray until a command needs it
_HOMES = {
    "DeployedGraph": "._deployed",
    "NodeHandle": "._handles",
    "init_ray": "._init",
    "RunError": "._launch",
    "RunResult": "._launch",
    "launch": "._launch",
    "MultiplexNodeWrapper": "._multiplex",
    "Column": "._refs",
    "RefTrace": "._refs",
    "chunk_grid": "._refs",
    "RunDir": "._rundir",
    "SampleResult": "._sampling",
    "sample_run": "._sampling",
    "SampleStore": "._store",
    "create_store": "._store",
    "RayBufferView": "._view",
    "NodeWrapper": "._wrapper",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kestrel_ray' has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
