"""What a config that is not the user's own may make Kestrel import and run (``trust=False``).

A run folder handed over by someone else holds a ``config.yml`` that looks like data, but every
``_target_`` in it is a dotted path Kestrel imports and calls: ``{_target_: os.system,
command: "touch PWNED"}`` would run a shell command. :func:`untrusted_problems` checks such a
config *before anything is imported* and then, for the names that pass, what they resolve to.
A config that is not trusted may name:

* **Kestrel's config classes**: classes defined in :data:`TARGET_MODULES` — the priors of
  kestrel-core, its test models, kestrel-torch's estimators, networks and embeddings, and the
  layers of ``torch.nn`` — reached through a path in Kestrel's packages (or ``torch.nn``).
  Functions are not (``kestrel_core.import_target``, ``instantiate``, ``load_config``,
  ``kestrel.launch``, ``kestrel.main`` … would import or run any dotted name or config given
  as an argument), nor the test models that write files at a path of their arguments or kill
  their process (:data:`EXCLUDED`), nor anything reached through an attribute that is defined
  elsewhere (``kestrel_core.testing.models.os.system``).
* **the code of its code folders** (``paths.imports``): classes and functions defined in a
  module whose file lies in one of them — never in the run folder itself (a run folder carries
  no code: a code folder inside it, or a module file inside it, is refused) nor in a folder of
  the Python installation (``/usr/lib/python3.12`` as a "code folder" would reach the standard
  library). The module is located without importing anything; an attribute path that leaves
  the module (``model.os.system``) is refused after the import.
* **Ray settings that neither fetch nor run code nor connect elsewhere**: the ``ray`` section
  may hold only :data:`RAY_INIT_KEYS` (no ``address``: joining a cluster someone else runs
  means unpickling what it returns; no ``runtime_env``: ``pip``, ``env_vars``,
  ``worker_process_setup_hook`` … run code), and a node's ``ray`` options no ``runtime_env``.

* **external programs of its code folders**: a :class:`~kestrel_core.Program` simulator runs
  a command, so its program (``command[0]``, made absolute against the config's folder) must
  be a file inside one of the code folders (a bare name found on ``PATH``, ``sh`` or
  ``python``, would run whatever its arguments say), and its ``env`` may not set the variables
  that make a program load or run other code (:data:`PROGRAM_ENV_REFUSED`: ``LD_PRELOAD``,
  ``PATH``, ``BASH_ENV``, ``PYTHONPATH`` …).

* **the modules the user trusts**: names under the module prefixes listed, comma-separated,
  in the environment variable ``KESTREL_TRUSTED_MODULES`` (e.g. ``mysim,lab.models`` for a
  simulator package installed in site-packages). The environment is the user's, not the run
  folder's, so a user's own runs of an installed package open without ``--trust``.

Kestrel's own config interpolations (``${calc:…}`` and the other resolvers) evaluate
arithmetic only; values are checked after interpolation, so a target assembled from pieces is
checked as the string it becomes.
"""

from __future__ import annotations

import importlib.machinery
import inspect
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kestrel_core._errors import ConfigError
from kestrel_core.config._instantiate import TARGET, import_target
from kestrel_core.config._suggest import key_path
from kestrel_core.program._program import PROGRAM_TARGETS, Program

__all__ = [
    "KESTREL_PACKAGES",
    "TARGET_MODULES",
    "EXCLUDED",
    "RAY_INIT_KEYS",
    "untrusted_problems",
    "user_trusted_modules",
    "PROGRAM_ENV_REFUSED",
]

#: the environment variable listing module prefixes the user trusts in any config
TRUSTED_ENV = "KESTREL_TRUSTED_MODULES"


def user_trusted_modules() -> tuple[str, ...]:
    """The module prefixes of ``KESTREL_TRUSTED_MODULES`` (comma-separated, blanks ignored)."""
    raw = os.environ.get(TRUSTED_ENV, "")
    return tuple(p.strip().strip(".") for p in raw.split(",") if p.strip().strip("."))


#: Kestrel's packages (the application and its three libraries)
KESTREL_PACKAGES = ("kestrel", "kestrel_core", "kestrel_ray", "kestrel_torch")
#: modules whose classes a config that is not trusted may name (and their submodules)
TARGET_MODULES = (
    "kestrel_core.priors",
    "kestrel_core.testing.models",
    "kestrel_torch.estimators",
    "kestrel_torch.nets",
    "kestrel_torch.embeddings",
    "torch.nn.modules",
)
#: classes of :data:`TARGET_MODULES` that write files at a path they are given or kill their
#: process (test models for fault injection)
EXCLUDED = (
    "kestrel_core.testing.models.CrashOnce",
    "kestrel_core.testing.models.KilledAt",
    "kestrel_core.testing.models.HangsAt",
)
#: ``ray.init`` arguments of the ``ray`` section that a config that is not trusted may set
RAY_INIT_KEYS = (
    "num_cpus",
    "num_gpus",
    "resources",
    "object_store_memory",
    "namespace",
    "logging_level",
    "logging_format",
    "log_to_driver",
    "configure_logging",
    "include_dashboard",
    "ignore_reinit_error",
    "labels",
)
#: environment variables a Program of a config that is not trusted may not set (names, and
#: prefixes ending in ``*``): they make a program load libraries, run start-up files or find
#: other programs
PROGRAM_ENV_REFUSED = (
    "LD_*",
    "DYLD_*",
    "PATH",
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "CDPATH",
    "GCONV_PATH",
    "PYTHON*",
    "PERL5*",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "MALLOC_*",
    "GLIBC_TUNABLES",
)
_TORCH_NN = "torch.nn."
_ROLES = ("simulator", "estimator")


def _targets(obj: Any, where: str, out: list[tuple[str, Any]]) -> None:
    """Every ``_target_`` value in ``obj`` (any depth, ``_input_`` mappings included)."""
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            path = key_path(where, str(k))
            if k == TARGET:
                out.append((path, v))
            else:
                _targets(v, path, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _targets(v, key_path(where, i), out)


def _all_targets(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    _targets(data, "", out)
    graph = data.get("graph")
    if isinstance(graph, Mapping):  # the plain-string form: ``simulator: model.Sim``
        for name, node in graph.items():
            for role in _ROLES:
                value = node.get(role) if isinstance(node, Mapping) else None
                if isinstance(value, str):
                    out.append((key_path("graph", str(name), role), value))
    return out


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def installation_dirs() -> list[str]:
    """The folders of the running Python installation (real paths): its prefixes, standard
    library, site-packages (also the user's)."""
    found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    found += [p for k, p in sysconfig.get_paths().items() if k not in ("include", "platinclude")]
    try:
        found += site.getsitepackages()
    except AttributeError:  # pragma: no cover - a virtualenv's old site module
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    if isinstance(user, str):
        found.append(user)
    root = os.path.abspath(os.sep)
    return sorted({_real(p) for p in found if p and _real(p) != root})


def _installed(folder: str, installation: Sequence[str]) -> bool:
    parts = folder.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    return any(_inside(folder, d) for d in installation)


def _module_file(name: str, folders: Sequence[str]) -> str | None:
    """The file of the longest module prefix of the dotted ``name`` as the code ``folders``
    hold it (real path; a package's folder for a namespace package), found without importing
    anything; ``None`` when no folder holds its top-level module."""
    parts = name.split(".")
    locations: list[str] = list(folders)
    found: str | None = None
    for i, part in enumerate(parts[:-1] if len(parts) > 1 else parts):
        try:
            spec = importlib.machinery.PathFinder.find_spec(part, locations)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return found if i else None
        if spec.origin and spec.has_location:
            found = _real(spec.origin)
        else:
            subs = list(spec.submodule_search_locations or [])
            found = _real(subs[0]) if subs else found
        locations = list(spec.submodule_search_locations or [])
        if not locations:
            break
    return found


def _defined_in(obj: Any) -> tuple[str, str | None]:
    """The module that defines ``obj`` and its file (real path, ``None`` if it has none)."""
    module = getattr(obj, "__module__", None) or ""
    loaded = sys.modules.get(module)
    file = getattr(loaded, "__file__", None)
    return module, (_real(file) if isinstance(file, str) else None)


def _in_modules(module: str, modules: Iterable[str]) -> bool:
    return any(module == m or module.startswith(m + ".") for m in modules)


class _Checker:
    def __init__(self, folders: Sequence[str], run_dir: str | None):
        self.run = _real(run_dir) if run_dir else None
        installation = installation_dirs()
        self.problems: list[str] = []
        self.code: list[str] = []  # the code folders targets may come from
        self.skipped: dict[str, str] = {}  # folder → why it is not a code folder
        for folder in folders:
            real = _real(folder)
            if self.run is not None and _inside(real, self.run):
                self.problems.append(
                    f"paths.imports: the code folder {folder} lies inside the run folder "
                    f"{self.run}; a run folder carries no code"
                )
            elif _installed(real, installation):
                self.skipped[real] = "a folder of the Python installation"
            else:
                self.code.append(real)
        self.shown = ", ".join(folders) or "none"
        self.missing = [f for f in folders if not os.path.isdir(_real(f))]

    def _in_run(self, file: str | None) -> bool:
        return self.run is not None and file is not None and _inside(file, self.run)

    def _from_code(self, file: str | None) -> bool:
        return (
            file is not None and not self._in_run(file) and any(_inside(file, d) for d in self.code)
        )

    def name_problem(self, name: str) -> str | None:
        """Why ``name`` may not be imported (checked on the string alone), or ``None``."""
        if _in_modules(name, user_trusted_modules()):
            return None
        top = name.split(".")[0]
        if top in KESTREL_PACKAGES or name.startswith(_TORCH_NN):
            shadow = _module_file(top, self.code)
            if shadow is not None:
                return (
                    f"{name!r}: the code folder holding {shadow} would stand in for the "
                    f"installed {top!r}"
                )
            return None
        file = _module_file(name, self.code)
        if file is not None and self._in_run(file):
            return (
                f"{name!r} comes from {file}, inside the run folder; a run folder carries no code"
            )
        if self._from_code(file):
            return None
        hidden = _module_file(name, list(self.skipped))
        if hidden is not None:
            return f"{name!r} comes from {hidden}, a folder of the Python installation"
        if self.missing and file is None:
            return (
                f"{name!r}: no module named {name.split('.')[0]!r} in the run's code folders: "
                f"{', '.join(self.missing)} does not exist (the code was moved or deleted; "
                "put it back there, or launch a copy of the model folder)"
            )
        return (
            f"{name!r} is neither one of Kestrel's config classes nor code from the run's code "
            f"folders (paths.imports: {self.shown}) nor under a module the user trusts "
            f"({TRUSTED_ENV})"
        )

    def object_problem(self, name: str, obj: Any) -> str | None:
        """Why the imported ``obj`` of ``name`` may not be built, or ``None``."""
        if _in_modules(name, user_trusted_modules()):
            return None
        module, file = _defined_in(obj)
        top = name.split(".")[0]
        if obj is Program:  # its command is checked on the config (:meth:`program_problems`)
            return None if name in PROGRAM_TARGETS else f"{name!r}: name it kestrel_core.Program"
        if top in KESTREL_PACKAGES or name.startswith(_TORCH_NN):
            qualname = f"{module}.{getattr(obj, '__qualname__', '')}"
            if not inspect.isclass(obj) or not _in_modules(module, TARGET_MODULES):
                what = "a class" if inspect.isclass(obj) else f"a {type(obj).__name__}"
                return (
                    f"{name!r} is {what} of {module or 'no module'}, not one of Kestrel's "
                    "config classes (priors, estimators, networks, embeddings, test models, "
                    "torch.nn layers)"
                )
            if qualname in EXCLUDED:
                return f"{name!r} writes files at a path it is given"
            return None
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            return f"{name!r} is a {type(obj).__name__}, not a class or function of the run's code"
        if not self._from_code(file):
            return (
                f"{name!r} is defined in {module or 'no module'}"
                f"{f' ({file})' if file else ''}, not in the run's code folders "
                f"(paths.imports: {self.shown})"
            )
        return None

    def program_problems(self, where: str, spec: Mapping[str, Any]) -> list[str]:
        """What a :class:`~kestrel_core.Program` spec at ``where`` may not run (its paths
        already absolute, :func:`~kestrel_core.program._program.absolute_program_paths`)."""
        problems = []
        command = spec.get("command")
        if isinstance(command, str):
            command = command.split()
        first = command[0] if isinstance(command, list) and command else None
        if isinstance(first, str) and os.path.isabs(first):
            real = _real(first)
            if self._in_run(real):
                problems.append(
                    f"{where}.command: the program {first} lies inside the run folder; a run "
                    "folder carries no code"
                )
            elif not self._from_code(real):
                problems.append(
                    f"{where}.command: the program {first} is not in the run's code folders "
                    f"(paths.imports: {self.shown})"
                )
        elif first is not None:
            problems.append(
                f"{where}.command: the program {first!r} is looked up on PATH, not a file of "
                f"the run's code folders (paths.imports: {self.shown})"
            )
        env = spec.get("env")
        for key in env if isinstance(env, Mapping) else ():
            name = str(key)
            if any(
                name.startswith(p[:-1]) if p.endswith("*") else name == p
                for p in PROGRAM_ENV_REFUSED
            ):
                problems.append(
                    f"{where}.env.{name}: not taken from a config that is not trusted (it makes "
                    "a program load or run other code)"
                )
        return problems


def _program_specs(obj: Any, where: str, out: list[tuple[str, Mapping[str, Any]]]) -> None:
    """Every mapping of ``obj`` whose ``_target_`` names :class:`~kestrel_core.Program`."""
    if isinstance(obj, Mapping):
        if obj.get(TARGET) in PROGRAM_TARGETS:
            out.append((where, obj))
        for k, v in obj.items():
            _program_specs(v, key_path(where, str(k)), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _program_specs(v, key_path(where, i), out)


#: why a ``ray`` key is refused in a config that is not trusted
_RAY_WHY = {
    "address": "it joins the cluster it names, whose workers return what the driver unpickles; "
    "give a cluster with --address",
    "runtime_env": "a runtime environment installs and runs code (pip, env_vars, setup hooks)",
}


def _ray_problems(data: Mapping[str, Any]) -> list[str]:
    problems = []
    ray = data.get("ray")
    for key in ray if isinstance(ray, Mapping) else ():
        if key not in RAY_INIT_KEYS:
            why = _RAY_WHY.get(
                str(key), f"such a config may set only {', '.join(RAY_INIT_KEYS)} of ray.init"
            )
            problems.append(f"ray.{key}: not taken from a config that is not trusted ({why})")
    graph = data.get("graph")
    for name, node in graph.items() if isinstance(graph, Mapping) else ():
        options = node.get("ray") if isinstance(node, Mapping) else None
        if isinstance(options, Mapping) and "runtime_env" in options:
            problems.append(
                f"graph.{name}.ray.runtime_env: not taken from a config that is not trusted "
                f"({_RAY_WHY['runtime_env']})"
            )
    return problems


def untrusted_problems(
    data: Mapping[str, Any],
    imports: Sequence[str],
    run_dir: str | None = None,
    roles: Sequence[str] = ("simulator", "estimator"),
) -> list[str]:
    """What a config that is not trusted may not do (see the module docstring).

    Every dotted name is first checked as a string; only when all pass are they imported
    (Kestrel's modules, ``torch.nn`` and the code folders' modules) and what they name checked.

    Args:
        data: the resolved config (plain containers, interpolations resolved).
        imports: its code folders (``paths.imports``, absolute).
        run_dir: the run folder the config came from (code inside it is refused).
        roles: the nodes' roles whose targets the command builds (``load_config``'s
            ``check_targets``): only their names are imported to be checked; the others are
            checked as strings alone (``kestrel sample prior`` never imports an estimator, so
            never torch).

    Returns:
        One message per problem, each starting with its key path (empty: nothing to refuse).
        A name that fails to import is not a problem here (the normal checks report it).
    """
    checker = _Checker(imports, run_dir)
    problems = list(checker.problems) + _ray_problems(data)
    named: list[tuple[str, str]] = []
    for where, value in _all_targets(data):
        if not isinstance(value, str):
            continue
        problem = checker.name_problem(value)
        if problem:
            problems.append(f"{where}: {problem}")
        else:
            named.append((where, value))
    programs: list[tuple[str, Mapping[str, Any]]] = []
    _program_specs(data, "", programs)
    for where, spec in programs:
        problems += checker.program_problems(where, spec)
    if problems:  # nothing imported
        return problems
    skipped = tuple(
        f"graph.{name}.{role}"
        for name in (data.get("graph") or {})
        for role in _ROLES
        if role not in roles
    )
    for where, value in named:
        if where.startswith(skipped) and skipped:
            continue  # never built by this command: never imported
        try:
            obj = import_target(value, imports)
        except ConfigError:
            continue
        problem = checker.object_problem(value, obj)
        if problem:
            problems.append(f"{where}: {problem}")
    return problems
