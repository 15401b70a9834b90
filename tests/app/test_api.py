"""The public surface of the application package ``kestrel``, and what importing it loads."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kestrel


def test_public_api_is_pinned():
    assert kestrel.__all__ == [
        "__version__",
        "launch",
        "RunResult",
        "sample_run",
        "SampleResult",
        "open_run",
        "Run",
        "Posterior",
        "Prior",
        "RunDir",
        "import_simulations",
        "ImportResult",
        "RunError",
        "main",
    ]
    for name in kestrel.__all__:
        assert hasattr(kestrel, name)


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Launch'"):
        kestrel.Launch  # noqa: B018


def test_importing_kestrel_and_building_the_parser_loads_neither_ray_nor_torch():
    code = (
        "import sys, kestrel; from kestrel.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('ray', 'torch', 'zuko', 'kestrel_ray', 'kestrel_torch') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_python_m_kestrel_is_the_command():
    done = subprocess.run(
        [sys.executable, "-m", "kestrel", "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == f"kestrel {kestrel.__version__}"
