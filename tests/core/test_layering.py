"""kestrel_core never imports ray or torch, nor pytest (checked in a fresh interpreter).

(The ``kestrel`` command lives in the application package, ``kestrel``:
``tests/app/test_api.py`` checks what it imports.)
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = f"""
import sys
import kestrel_core
from kestrel_core import load_config, sample_forward
cfg = load_config({str(ROOT / "examples" / "05_linear_regression" / "config.yml")!r})
trace = sample_forward(cfg.graph, 4, seed=0)
assert trace["x.value"].shape == (4, 1000)
loaded = sorted(m for m in ("ray", "torch", "zuko", "kestrel_ray", "kestrel_torch", "pytest") if m in sys.modules)
print("loaded:", loaded)
"""


def test_importing_and_using_kestrel_core_loads_neither_ray_nor_torch():
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "loaded: []"


def test_the_test_models_import_without_pytest():
    """``kestrel_core.testing.models`` (simulators named in configs, imported by node actors)
    needs only numpy: the package's store contract, which needs pytest, loads on first use."""
    script = (
        "import sys\n"
        "from kestrel_core.testing import models\n"
        "from kestrel_core.testing.models import Gauss, Noise\n"
        "assert all(hasattr(models, name) for name in models.__all__)\n"
        "loaded = sorted(m for m in ('ray', 'torch', 'pytest') if m in sys.modules)\n"
        "print('loaded:', loaded)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "loaded: []"
