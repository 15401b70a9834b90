"""Security (issue 11, item 5): nothing a run directory or snapshot holds is unpickled, and
``_target_`` imports only the dotted path the config names (no eval).

The first test reads the package sources (no import of ray or torch): every ``np.load`` passes
``allow_pickle=False``, every ``torch.load`` passes ``weights_only=True``, and nothing calls
``pickle``/``marshal`` loads, ``eval`` or ``exec`` — except the node actor unpickling the node
the driver sent it (in memory, never from disk).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

from kestrel_core import ConfigError, instantiate
from kestrel_core.config._instantiate import import_target

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
#: (file, call) pairs allowed to unpickle: the driver's own node blob, sent in memory
ALLOWED = {("kestrel_ray/node/_wrapper.py", "cloudpickle.loads")}
UNPICKLERS = {"pickle", "cloudpickle", "marshal", "dill", "joblib", "shelve"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def _keyword(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def _problems(path: Path, rel: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        where = f"{rel}:{node.lineno}: {name}"
        if name in ("np.load", "numpy.load") and _keyword(node, "allow_pickle") is not False:
            out.append(f"{where} without allow_pickle=False")
        elif name == "torch.load" and _keyword(node, "weights_only") is not True:
            out.append(f"{where} without weights_only=True")
        elif name in ("eval", "exec", "builtins.eval", "builtins.exec"):
            out.append(where)
        elif (
            name.split(".")[0] in UNPICKLERS
            and name.rsplit(".", 1)[-1] in ("load", "loads", "open", "Unpickler")
            and (rel, name) not in ALLOWED
        ):
            out.append(where)
    return out


def test_nothing_from_a_run_directory_or_snapshot_is_unpickled():
    files = sorted(PACKAGES.glob("*/src/**/*.py"))
    assert len(files) > 50
    problems = []
    for path in files:
        rel = path.relative_to(path.parents[len(path.relative_to(PACKAGES).parts) - 3]).as_posix()
        problems += _problems(path, rel)
    assert not problems, "\n".join(problems)


def test_a_pickled_array_in_a_snapshot_is_refused(tmp_path):
    from kestrel_core.files._npz import save_npz

    np.save(tmp_path / "evil.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="pickle"):
        np.load(tmp_path / "evil.npy", allow_pickle=False)
    with pytest.raises(ValueError):  # the writer refuses object arrays too
        save_npz(tmp_path / "x.npz", {"x": np.array([object()], dtype=object)})


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "sec_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("class Thing:\n    def __init__(self, v=1):\n        self.v = v\n")
    marker = tmp_path / "ran"
    (pkg / "b.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return marker


def test_target_imports_only_the_named_dotted_path(tmp_path):
    marker = _package(tmp_path)
    before = set(sys.modules)
    try:
        thing = instantiate({"_target_": "sec_pkg.a.Thing", "v": 3}, [str(tmp_path)])
        assert thing.v == 3
        assert {m for m in set(sys.modules) - before if m.startswith("sec_pkg")} == {
            "sec_pkg",
            "sec_pkg.a",
        }
        assert not marker.exists()  # sec_pkg.b was not imported
        for target in (
            "__import__('sec_pkg.b')",
            "sec_pkg.b; import os",
            "sec_pkg.a.Thing()",
            "sec_pkg/b",
            "exec",
            "",
        ):
            with pytest.raises(ConfigError, match="dotted path"):
                import_target(target, [str(tmp_path)])
        assert not marker.exists()
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]
