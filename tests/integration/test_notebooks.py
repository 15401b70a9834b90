"""Issue 33 item 2: the notebook tutorials of ``examples/notebooks/`` execute, and are kept in git
without outputs.

Each notebook is executed by nbclient in a fresh ``python3`` kernel of this environment, from a
temporary copy of ``examples/notebooks/`` and the example folders it reads (so nothing is
written into the checkout: run folders, ``__pycache__``), and fails on the first cell that
raises. The kernel's ``TMPDIR`` is a folder of this test's own: every Ray the notebook starts
(a launch's local Ray, the notebook's own ``ray start`` nodes) keeps its session there, so a Ray
process that outlives the notebook names it on its command line and fails the test (and is
ended, by process id). ``ray stop`` is never run.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat
import pytest

from .helpers import EXAMPLES

NOTEBOOKS = EXAMPLES / "notebooks"
#: the example folders the notebooks read (``../<name>`` from the notebook's folder)
USED_EXAMPLES = ["05_linear_regression"]
#: a cell that takes longer than this is stuck (the notebooks run in about a minute together)
CELL_TIMEOUT = 600
#: seconds a Ray process of a finished notebook may take to exit
RAY_EXIT_WAIT = 30


def notebook_paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_tutorials_are_there():
    names = [p.name for p in notebook_paths()]
    assert "first_posterior.ipynb" in names and "laptop_to_cluster.ipynb" in names, names


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_notebook_in_git_carries_no_outputs(path: Path):
    """Outputs are stripped before a commit (examples/notebooks/README.md says how)."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} hold outputs or execution counts; strip them with "
        f"`jupyter nbconvert --clear-output --inplace {path.relative_to(EXAMPLES.parent)}`"
    )


def _own_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose command line or environment names ``marker``
    (the kernel's ``TMPDIR``: every process the notebook started inherits it, also Ray's
    agents and workers, whose command line is a title such as ``ray::IDLE``)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in cmdline or needle in environ:
            text = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append((int(entry.name), text))
    return found


def _kernel_env(tmp_root: Path) -> dict[str, str]:
    """The kernel's environment: temporary files (and Ray's sessions) in ``tmp_root``, no
    inherited cluster address. (Each notebook puts its kernel's scripts, ``kestrel`` and
    ``ray``, first on the PATH itself.)"""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAY_ADDRESS", "RAY_TMPDIR", "MPLBACKEND", "JPY_PARENT_PID")
    }
    env["TMPDIR"] = str(tmp_root)
    env["IPYTHONDIR"] = str(tmp_root / "ipython")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.stem)
def test_notebook_executes(path: Path, tmp_path: Path):
    copy = tmp_path / "examples"
    ignore = shutil.ignore_patterns("__pycache__", "runs", ".ipynb_checkpoints")
    shutil.copytree(NOTEBOOKS, copy / "notebooks", ignore=ignore)
    for name in USED_EXAMPLES:
        shutil.copytree(EXAMPLES / name, copy / name, ignore=ignore)
    workdir = copy / "notebooks"
    # short: Ray's socket paths live under it and must stay below the 107-byte limit
    tmp_root = Path(tempfile.mkdtemp(prefix="nb", dir="/tmp"))
    (tmp_root / "ipython").mkdir()
    nb = nbformat.read(workdir / path.name, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    start = time.monotonic()
    try:
        client.execute(env=_kernel_env(tmp_root), cwd=str(workdir))
        elapsed = time.monotonic() - start
        leaked = _own_processes(str(tmp_root))
        deadline = time.monotonic() + RAY_EXIT_WAIT
        while leaked and time.monotonic() < deadline:
            time.sleep(0.5)
            leaked = _own_processes(str(tmp_root))
    finally:
        for pid, _ in _own_processes(str(tmp_root)):  # ended here whatever happened
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp_root, ignore_errors=True)
    slowest = sorted(
        ((_cell_seconds(cell), i) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"),
        reverse=True,
    )[:3]
    print(
        f"\n{path.name}: executed in {elapsed:.1f} s; slowest cells: "
        + ", ".join(f"#{i} {s:.1f} s" for s, i in slowest)
    )
    assert not leaked, f"{path.name}: Ray processes outlived the notebook: " + "; ".join(
        f"{pid}: {cmd[:200]}" for pid, cmd in leaked
    )


def _cell_seconds(cell) -> float:
    """Seconds a cell ran, from the timings nbclient records in its metadata."""
    from datetime import datetime

    timing = cell.get("metadata", {}).get("execution", {})
    try:
        began = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
        ended = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return 0.0
    return (ended - began).total_seconds()
