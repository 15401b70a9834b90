"""What a row of the bank was simulated with: the simulator digest of a config.

Two configs make the same simulations when their graphs have the same nodes, each with the same
``simulator`` section and ``parents``, and the simulators' code is the same files. Everything
else of a node — ``estimator``, ``evidence``, ``scaffolds``, ``observed``, ``num_actors``,
``sample_chunk_size``, ``ray``, ``on_error``, ``dry_run``, ``timeout``, ``names`` — changes how
the rows are learned from, placed or shown, not what a row is (the keys
:func:`kestrel.preflight._launch_notes.row_key` calls the row keys).

:func:`simulator_digest` records, per config:

* ``graph``: node → ``{"simulator": <section>, "parents": [...]}``, the section as the config
  resolved it (:meth:`kestrel_core.graph.Spec.to_config`), with paths inside the run written as
  ``${run_dir}/…`` and a :class:`~kestrel_core.Program`'s program named by its file name (its
  bytes are in ``code``), so the same config in two run folders or two project copies has one
  digest;
* ``code``: module → ``{"file", "sha256"}`` for every top-level module of a simulator
  ``_target_`` that the config's code folders (``paths.imports``) hold — the file, or every
  ``.py`` file of the package folder (:func:`kestrel.rundir._code.module_file`); modules of the
  installed packages are left out, as :func:`~kestrel.rundir._code.code_changes` leaves them
  out — and ``program <node>`` → the program file of a Program simulator;
* ``digest``: sha256 of the canonical JSON of both.

:func:`digest_changes` names what differs between two digests: dotted config keys
(``graph.x.simulator.sigma: 0.1 → 0.2``) and code (``code of module 'model': model.py sha256
1a2b… → 3c4d…``). Pure standard library and numpy-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kestrel.rundir._code import module_file, target_modules
from kestrel_core import RunConfig
from kestrel_core.internal import Change, config_changes

__all__ = ["SimulatorDigest", "simulator_digest", "digest_changes"]

_PROGRAMS = (
    "kestrel_core.Program",
    "kestrel_core.program.Program",
    "kestrel_core.program._program.Program",
)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class SimulatorDigest:
    """The simulator digest of a config (see the module docstring).

    Attributes:
        digest: sha256 hex of ``graph`` and ``code``.
        graph: node → ``{"simulator", "parents"}`` (plain containers).
        code: module (or ``program <node>``) → ``{"file", "sha256"}``.
    """

    digest: str
    graph: dict[str, Any] = field(default_factory=dict)
    code: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON-ready record the bank's manifest keeps."""
        return {"digest": self.digest, "graph": self.graph, "code": self.code}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> SimulatorDigest:
        """The digest a manifest recorded.

        Raises:
            ValueError: ``data`` is not such a record.
        """
        digest, graph, code = data.get("digest"), data.get("graph"), data.get("code")
        if not isinstance(digest, str) or not isinstance(graph, dict):
            raise ValueError("not a simulator digest record")
        return cls(digest, dict(graph), dict(code) if isinstance(code, dict) else {})


def simulator_digest(
    config: RunConfig, run_root: str | os.PathLike[str] | None = None
) -> SimulatorDigest:
    """The simulator digest of ``config`` (a :class:`kestrel_core.RunConfig`).

    Args:
        config: the config (its graph and ``paths.imports``).
        run_root: the run the config is for: strings under it are written ``${run_dir}/…``.

    Raises:
        OSError: a code file cannot be read.
    """
    root = os.path.abspath(os.fspath(run_root)) if run_root is not None else None
    graph: dict[str, Any] = {}
    code: dict[str, Any] = {}
    for name, node in config.graph.nodes.items():
        section = node.simulator.to_config()
        if isinstance(section, str):
            section = {"_target_": section}
        section = _portable(section, root)
        if isinstance(section, dict) and section.get("_target_") in _PROGRAMS:
            program = _program_file(section)
            if program is not None:
                section["command"] = [os.path.basename(program), *section["command"][1:]]
                code[f"program {name}"] = {
                    "file": os.path.basename(program),
                    "sha256": _file_digest(program),
                }
        graph[str(name)] = {"simulator": section, "parents": list(node.parents)}
    folders = tuple(config.paths.imports or ())
    for top in sorted(target_modules({n: {"simulator": g["simulator"]} for n, g in graph.items()})):
        where = module_file(top, folders)
        if where is not None:
            code[top] = {"file": os.path.basename(where), "sha256": _path_digest(where)}
    text = json.dumps({"graph": graph, "code": code}, sort_keys=True, default=str)
    return SimulatorDigest(hashlib.sha256(text.encode("utf-8")).hexdigest(), graph, code)


def digest_changes(old: SimulatorDigest, new: SimulatorDigest) -> list[Change]:
    """What differs between the digest rows were made with (``old``) and another (``new``):
    config keys under ``graph`` (nodes added or removed, simulator keys, parents), then code.
    ``[]`` when they make the same rows (numbers compare by value: ``1`` equals ``1.0``)."""
    if old.digest == new.digest:
        return []
    changes = config_changes(old.graph, new.graph, prefix="graph")
    for key in list(old.code) + [k for k in new.code if k not in old.code]:
        before, after = old.code.get(key), new.code.get(key)
        if (before or {}).get("sha256") != (after or {}).get("sha256"):
            what = key if key.startswith("program ") else f"module {key!r}"
            changes.append(Change(f"code of {what}", _Code(before), _Code(after)))
    return changes


class _Code:
    """A code file as a :class:`Change` shows it: its name and digest (in full)."""

    whole = True

    def __init__(self, entry: Mapping[str, Any] | None):
        self.text = (
            "(not in the code folders)"
            if not entry
            else f"{entry.get('file')} sha256 {str(entry.get('sha256'))[:12]}"
        )

    def __str__(self) -> str:
        return self.text


def _portable(value: Any, root: str | None) -> Any:
    """``value`` with strings under ``root`` written ``${run_dir}/…`` (plain containers)."""
    if isinstance(value, Mapping):
        return {str(k): _portable(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v, root) for v in value]
    if root and isinstance(value, str) and (value == root or value.startswith(root + os.sep)):
        return "${run_dir}" + value[len(root) :].replace(os.sep, "/")
    return value


def _program_file(section: Mapping[str, Any]) -> str | None:
    """The program file a Program section runs (``command[0]``: a path, or a name on
    ``PATH``); ``None`` when there is none to read."""
    command = section.get("command")
    if not isinstance(command, list) or not command or not isinstance(command[0], str):
        return None
    first = command[0]
    path = first if os.sep in first else shutil.which(first)
    return os.path.realpath(path) if path and os.path.isfile(path) else None


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _path_digest(path: str) -> str:
    """sha256 of a module file, or of a package folder's ``.py`` files (names and bytes)."""
    if not os.path.isdir(path):
        return _file_digest(path)
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            full = os.path.join(folder, name)
            h.update(os.path.relpath(full, path).replace(os.sep, "/").encode("utf-8") + b"\0")
            h.update(_file_digest(full).encode("ascii"))
    return h.hexdigest()
