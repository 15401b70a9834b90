"""No import cycle among the modules of the four packages; the layer rule; no private imports.

The sources are parsed with :mod:`ast`, never imported, so this runs where neither ray nor
torch is installed. Edges are every ``import``/``from … import`` statement between modules of
the three packages, wherever it stands: at module level, under ``if TYPE_CHECKING:`` (what a
type checker follows) and inside functions (a lazy import still runs, only later) — so a
cycle cannot hide by moving an import into a function. Imports through ``importlib`` (the
lazy public-name table of ``kestrel_ray/__init__.py``) are not statements and are not seen.

Importing ``a.b.c`` also runs the ``__init__`` of ``a.b`` and ``a`` unless the importer is
inside them already, so those packages are edges too.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "kestrel_core": ROOT / "packages" / "kestrel-core" / "src" / "kestrel_core",
    "kestrel_ray": ROOT / "packages" / "kestrel-ray" / "src" / "kestrel_ray",
    "kestrel_torch": ROOT / "packages" / "kestrel-torch" / "src" / "kestrel_torch",
    "kestrel": ROOT / "packages" / "kestrel" / "src" / "kestrel",
}
#: package → the packages (and third-party layers) it must never import (DESIGN §2): core never
#: imports ray or torch, ray and torch never import each other, no library imports the
#: application
FORBIDDEN = {
    "kestrel_core": {"ray", "torch", "zuko", "kestrel_ray", "kestrel_torch", "kestrel"},
    "kestrel_ray": {"torch", "zuko", "kestrel_torch", "kestrel"},
    "kestrel_torch": {"ray", "kestrel_ray", "kestrel"},
}


def modules(packages: dict[str, Path]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (source file, is a package ``__init__``)."""
    out = {}
    for folder in packages.values():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder.parent).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts.pop()
            out[".".join(parts)] = (path, is_pkg)
    return out


def ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imported(name: str, path: Path, is_pkg: bool, known: set[str]) -> Iterator[str]:
    """The known modules that ``name``'s import statements name (targets only)."""
    package = name if is_pkg else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def graph(packages: dict[str, Path] = PACKAGES) -> dict[str, set[str]]:
    """Module → the modules of the packages that importing it runs first."""
    mods = modules(packages)
    known = set(mods)
    out: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        own = set(ancestors(name)) | ({name} if is_pkg else set())
        edges = set()
        for target in imported(name, path, is_pkg, known):
            for mod in (*ancestors(target), target):
                if mod in known and mod not in own and mod != name:
                    edges.add(mod)
        out[name] = edges
    return out


def test_the_three_packages_have_no_import_cycle():
    deps = graph()
    assert {"kestrel_core.store", "kestrel_ray", "kestrel_torch", "kestrel.cli"} <= set(
        deps
    )  # the files were found
    try:
        order = list(graphlib.TopologicalSorter(deps).static_order())
    except graphlib.CycleError as err:
        raise AssertionError("import cycle: " + " → ".join(err.args[1])) from None
    assert len(order) == len(deps)


def test_the_checker_sees_a_cycle(tmp_path):
    pkg = tmp_path / "kestrel_core"
    (pkg / "_sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ._a import x\n")
    (pkg / "_a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._sub._b import y\n"
    )
    (pkg / "_sub" / "__init__.py").write_text("from ._b import y\n")
    (pkg / "_sub" / "_b.py").write_text("def f():\n    from .._a import x\n")
    deps = graph({"kestrel_core": pkg})
    assert deps["kestrel_core._a"] == {"kestrel_core._sub", "kestrel_core._sub._b"}
    assert deps["kestrel_core._sub._b"] == {"kestrel_core._a"}
    try:
        list(graphlib.TopologicalSorter(deps).static_order())
    except graphlib.CycleError:
        return
    raise AssertionError("the cycle _a → _sub._b → _a was not found")


def statements(package: str) -> Iterator[tuple[str, str]]:
    """``(module, imported module)`` for every absolute import statement of ``package``."""
    for name, (path, _) in modules({package: PACKAGES[package]}).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                yield from ((name, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield name, node.module


def test_the_layer_rule():
    found = [
        f"{name} imports {target}"
        for package, forbidden in FORBIDDEN.items()
        for name, target in statements(package)
        if target.split(".")[0] in forbidden
    ]
    assert found == []


def test_no_package_imports_a_private_module_of_another():
    found = [
        f"{name} imports {target}"
        for package in PACKAGES
        for name, target in statements(package)
        if target.split(".")[0] in PACKAGES
        and target.split(".")[0] != package
        and any(p.startswith("_") and not p.startswith("__") for p in target.split(".")[1:])
    ]
    assert found == []


def test_each_library_top_level_holds_its_face_and_concept_folders():
    for package in ("kestrel_core", "kestrel_ray", "kestrel_torch"):
        modules_at_top = sorted(p.name for p in PACKAGES[package].glob("*.py"))
        assert len(modules_at_top) <= 6, (package, modules_at_top)
        assert {"__init__.py", "_errors.py"} <= set(modules_at_top), package
