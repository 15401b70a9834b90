"""The public surface of kestrel_ray, and the layer rule (no torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
        "StoreHandle",
        "NodeWrapper",
        "NodeHandle",
        "MultiplexNodeWrapper",
        "RayBufferView",
        "RunError",
    ]
    for name in kestrel_ray.__all__:
        assert hasattr(kestrel_ray, name)


@pytest.mark.parametrize("name", ["launch", "RunResult", "sample_run", "SampleResult", "RunDir"])
def test_the_application_names_that_moved_to_kestrel_still_work_with_a_warning(name):
    import kestrel

    with pytest.warns(DeprecationWarning, match=f"kestrel_ray.{name} moved to kestrel.{name}"):
        assert getattr(kestrel_ray, name) is getattr(kestrel, name)


def test_importing_kestrel_ray_never_imports_torch():
    # every public name, so that the lazily imported modules are loaded too
    code = "import sys, kestrel_ray; [getattr(kestrel_ray, n) for n in kestrel_ray.__all__]; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_building_the_cli_parser_does_not_import_ray():
    # `kestrel --help` loads the launch/sample entry points; ray waits until a command runs
    code = (
        "import sys; from kestrel.cli import build_parser; parser, unavailable = build_parser(); "
        "assert 'launch' in parser._subparsers._group_actions[0].choices and not unavailable, unavailable; "
        "sys.exit('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Launch'"):
        kestrel_ray.Launch  # noqa: B018


def test_init_ray_is_idempotent():
    assert kestrel_ray.init_ray() is None  # the session's Ray is already running
