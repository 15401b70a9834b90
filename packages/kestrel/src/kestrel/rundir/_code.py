"""Whether two configs of a run import the same code (the code folder counts).

``paths.imports`` is left out of the key-by-key comparison of a run's recorded config with a
new one (:func:`kestrel.rundir._config.run_config_changes`): where the code lies is not what
the run is — the same model folder found through a relative path after the project was copied
or moved is the same code. What the run is made of is the files its targets import, so
:func:`code_changes` compares those: the module of each dotted ``_target_`` (``model`` of
``model.AddNoise``) as each config's code folders find it. A copy of the model folder with an
edited ``model.py`` is then a change like any other, never a silent switch of the simulator
under a buffer simulated with the old code.
"""

from __future__ import annotations

import importlib.machinery
import os
from collections.abc import Mapping, Sequence
from typing import Any

from kestrel_core import RunConfig
from kestrel_core.internal import Change

__all__ = ["code_changes", "target_modules", "module_file"]


def target_modules(value: Any, key: str = "") -> set[str]:
    """The top-level modules of every dotted ``_target_`` (and plain-string ``simulator`` or
    ``estimator``) in a config's plain containers.

    Example:
        >>> sorted(target_modules({"x": {"simulator": {"_target_": "model.Sim"}}}))
        ['model']
    """
    if isinstance(value, Mapping):
        out: set[str] = set()
        for k, v in value.items():
            out |= target_modules(v, str(k))
        return out
    if isinstance(value, (list, tuple)):
        return set().union(*(target_modules(v) for v in value)) if value else set()
    if key in ("_target_", "simulator", "estimator") and isinstance(value, str) and "." in value:
        return {value.split(".")[0]}
    return set()


def module_file(top: str, folders: Sequence[str]) -> str | None:
    """Where module ``top`` is found in ``folders`` only (its file, or its package's folder),
    or ``None`` when none of them holds it (it then comes from the installed packages, the same
    for any config)."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, [os.fspath(d) for d in folders])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin and spec.has_location:
        return os.path.realpath(spec.origin)
    locations = list(spec.submodule_search_locations or [])
    return os.path.realpath(locations[0]) if locations else None


class _Code:
    """Where a config finds one of its modules, as a :class:`Change` shows it (in full)."""

    whole = True

    def __init__(self, top: str, where: str | None, folders: Sequence[str]):
        self.text = where or f"{top} not in {', '.join(folders) or '(no code folder)'}"

    def __str__(self) -> str:
        return self.text


def code_changes(old: RunConfig, new: RunConfig) -> list[Change]:
    """``paths.imports`` as a change when two configs import their targets from other files.

    Args:
        old, new: :class:`kestrel_core.RunConfig` (the run's recorded one, loaded for where
            the run lies now, and the new one).

    Returns:
        ``[Change("paths.imports", old, new)]`` naming the first module found at another file
        (or in one config's code folders only) on each side; ``[]`` when every target module
        comes from the same file.
    """
    old_dirs, new_dirs = tuple(old.paths.imports or ()), tuple(new.paths.imports or ())
    for top in sorted(target_modules(old.to_dict()) | target_modules(new.to_dict())):
        before, after = module_file(top, old_dirs), module_file(top, new_dirs)
        if before != after:
            return [
                Change("paths.imports", _Code(top, before, old_dirs), _Code(top, after, new_dirs))
            ]
    return []
