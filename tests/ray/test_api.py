"""The public surface of kestrel_ray, and the layer rule (no torch)."""

from __future__ import annotations

import subprocess
import sys

import kestrel_ray


def test_public_api_is_pinned():
    assert kestrel_ray.__all__ == [
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
        "launch",
        "RunResult",
        "RunError",
        "sample_run",
        "SampleResult",
        "RunDir",
    ]
    for name in kestrel_ray.__all__:
        assert hasattr(kestrel_ray, name)


def test_importing_kestrel_ray_never_imports_torch():
    code = "import sys, kestrel_ray; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_init_ray_is_idempotent():
    assert kestrel_ray.init_ray() is None  # the session's Ray is already running
