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

from .__about__ import __version__
from ._deployed import DeployedGraph
from ._handles import NodeHandle
from ._init import init_ray
from ._launch import RunError, RunResult, launch
from ._multiplex import MultiplexNodeWrapper
from ._refs import Column, RefTrace, chunk_grid
from ._rundir import RunDir
from ._sampling import SampleResult, sample_run
from ._store import SampleStore, create_store
from ._view import RayBufferView
from ._wrapper import NodeWrapper
