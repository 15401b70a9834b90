"""The user's code on a cluster: Ray's runtime environment for a run that joins one.

A run that joins a cluster (``--address`` / ``RAY_ADDRESS``) ships the config's folder — the
folder its ``_target_`` modules are imported from — as Ray's ``working_dir``: every actor, on
any machine, starts in an unpacked copy of it, with the copy on ``sys.path``. Worker machines
then need only the installed Kestrel packages and the user's own pip dependencies (give those
as ``ray: {runtime_env: {pip: [...]}}`` in the config, or per node in its ``ray`` options).

What is not shipped (the documented rule):

* Kestrel run directories inside the folder (a folder holding ``config.yml`` beside
  ``status.json``, and the run being launched), ``.git``, ``__pycache__`` and ``*.pyc``;
* files larger than :data:`MAX_FILE_BYTES` (16 MiB): large data does not travel with the code.
  Observations are read on the driver and travel as objects; a simulator that reads a large
  file of its own needs it on every node (a shared filesystem) or inside an installed package.

Ray also leaves out what the folder's ``.gitignore`` and ``.rayignore`` files name. Other
``paths.imports`` directories inside the config's folder travel with it; those outside it are
not shipped (a warning names them): install them on every node as a package.

Inside a Ray job (``ray job submit --working-dir DIR -- kestrel launch …``) the job's own
``working_dir`` already carries the code, and nothing more is added. Where every node sees the
config's folder (a shared filesystem), ``ray: {runtime_env: {working_dir: null}}`` turns
shipping off.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kestrel_ray.internal import SHIPPED_FROM_VAR

__all__ = ["MAX_FILE_BYTES", "code_runtime_env", "shipped_excludes"]

#: files larger than this stay behind (bytes)
MAX_FILE_BYTES = 16 * 2**20

#: characters gitwildmatch patterns (Ray's excludes) give a meaning: escaped in paths
_GLOB_SPECIAL = re.compile(r"[][*?!\\#]|\s$")
_ALWAYS_EXCLUDED = [".git", "__pycache__", "*.pyc"]
#: set by Ray's job supervisor for the driver of a submitted job
_JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _is_run_directory(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.yml")) and os.path.isfile(
        os.path.join(path, "status.json")
    )


def shipped_excludes(folder: str, run_dir: str | None = None) -> list[str]:
    """Ray ``excludes`` (gitignore patterns, anchored at ``folder``) of the shipping rule.

    Args:
        folder: the folder that travels as ``working_dir``.
        run_dir: the run being launched (excluded when it lies inside ``folder``).

    Returns:
        ``[".git", "__pycache__", "*.pyc", "/runs/05", "/data/big.h5", …]``.
    """
    folder = os.path.abspath(folder)
    excludes = list(_ALWAYS_EXCLUDED)
    skip = {os.path.realpath(run_dir)} if run_dir else set()

    def pattern(path: str) -> str:  # anchored at the folder, gitwildmatch specials escaped
        rel = os.path.relpath(path, folder).replace(os.sep, "/")
        return "/" + _GLOB_SPECIAL.sub(r"\\\g<0>", rel)

    def visit(directory: str, ancestors: frozenset[str]) -> None:
        # Ray packs what lies behind symlinked folders too: follow them, but not in a circle
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = entry.path
            if entry.is_dir():
                real = os.path.realpath(path)
                if entry.name in (".git", "__pycache__") or real in ancestors:
                    continue
                if real in skip or _is_run_directory(path):
                    excludes.append(pattern(path))
                else:
                    visit(path, ancestors | {real})
            else:
                try:
                    big = entry.stat().st_size > MAX_FILE_BYTES
                except OSError:
                    continue
                if big:
                    excludes.append(pattern(path))

    visit(folder, frozenset({os.path.realpath(folder)}))
    return excludes


def _job_working_dir() -> bool:
    """Whether this process is the driver of a Ray job whose runtime env has a working_dir."""
    text = os.environ.get(_JOB_CONFIG_VAR)
    if not text:
        return False
    try:
        env = json.loads(text).get("runtime_env") or {}
    except (ValueError, AttributeError):
        return False
    return bool(env.get("working_dir"))


def code_runtime_env(
    imports: Sequence[str],
    run_dir: str | None,
    user_env: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """The runtime environment that ships a run's code to a cluster.

    Args:
        imports: the config's ``paths.imports`` (absolute; the first is the config's folder).
        run_dir: the run directory (never shipped).
        user_env: the config's ``ray.runtime_env``; its fields win over Kestrel's, and a
            ``working_dir`` of its own replaces the shipping rule (``working_dir: null``: ship
            nothing — every node sees the config's folder, e.g. on a shared filesystem).

    Returns:
        ``(runtime_env or None, warnings)``: the ``runtime_env`` for ``ray.init`` and the
        ``paths.imports`` entries that were not shipped, as messages.
    """
    env: dict[str, Any] = dict(user_env or {})
    if "working_dir" in env and env["working_dir"] is None:
        del env["working_dir"]  # shipping turned off: every node sees the folder already
        return (env or None), []
    if not imports or "working_dir" in env or _job_working_dir():
        return (env or None), []
    folder = os.path.abspath(imports[0])
    env["working_dir"] = folder
    env["excludes"] = [*shipped_excludes(folder, run_dir), *env.get("excludes", [])]
    # lets the node actors map the driver's import directories onto the unpacked copy
    env["env_vars"] = {**env.get("env_vars", {}), SHIPPED_FROM_VAR: folder}
    warnings = [
        f"paths.imports: {path} lies outside the config's folder {folder} and is not shipped to "
        "the cluster; install it on every node as a package"
        for path in imports[1:]
        if os.path.commonpath([folder, os.path.abspath(path)]) != folder
    ]
    return env, warnings
