"""A run's own config: ``RUN/config.yml`` written so that the run directory is relocatable.

Nothing in the file is an absolute path used to find the run's own files:

- ``run_dir`` is not written; loading puts the directory the run was opened at there.
- ``paths.graph`` / ``samples`` / ``buffer`` inside the run are left out when they are the
  defaults (``${run_dir}/<name>``) and written as ``${run_dir}/…`` otherwise; a path outside
  the run stays absolute.
- each observation is copied into ``RUN/observations/<node>.npy`` / ``.npz`` (an in-memory
  array is saved there), and ``observed`` names the copy relative to the run
  (``observations/x.npz['x']``), so the run samples after its data moved or vanished.
- ``buffer.initial_samples_path`` inside the run is written relative to it.
- ``paths.imports`` (the user's code, outside the run) is written both absolute and relative
  to the run; :func:`load_run_config` keeps the entries that exist, so a moved run finds its
  code either way.

:func:`load_run_config` also reads older run configs, which recorded ``run_dir`` and absolute
paths inside it: those paths are re-rooted at the directory the run is opened at.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kestrel.rundir._runfiles import (
    config_remedy,
    observation_remedy,
    read_array_file,
    read_yaml,
)
from kestrel.rundir._trust import is_trusted
from kestrel_core import ConfigError, KestrelError, RunConfig, load_config, load_observation
from kestrel_core.internal import (
    MISSING,
    Change,
    array_digest,
    config_changes,
    split_observation_spec,
    text_digest,
)

__all__ = [
    "RUN_CONFIG_FILE",
    "OBSERVATIONS_DIR",
    "portable_config",
    "save_observations",
    "run_config_yaml",
    "config_digest",
    "observation_digests",
    "run_config_changes",
    "load_run_config",
]

RUN_CONFIG_FILE = "config.yml"
OBSERVATIONS_DIR = "observations"
_RUN_PATHS = ("graph", "samples", "buffer")
#: keys that do not make two configs of a run differ (where the code or the data file lies)
_IGNORED = ("paths.imports", "graph.*.observed")


def _inside(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (POSIX separators) if it lies inside, else ``None``."""
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel.replace(os.sep, "/")


def _observation_sources(config: RunConfig) -> dict[str, tuple[str | None, str]]:
    """node → (absolute source file or ``None`` for an in-memory array, ``['key']`` suffix)."""
    out: dict[str, tuple[str | None, str]] = {}
    for name, node in (config._data.get("graph") or {}).items():
        spec = (node or {}).get("observed")
        if spec is None or config.graph.nodes[name].observed is None:
            continue
        if isinstance(spec, (str, os.PathLike)):
            out[name] = split_observation_spec(os.fspath(spec))
        else:
            out[name] = (None, "")
    return out


def _observation_spec(name: str, source: str | None, suffix: str) -> str:
    ext = ".npz" if source is not None and source.endswith(".npz") else ".npy"
    return f"{OBSERVATIONS_DIR}/{name}{ext}{suffix if ext == '.npz' else ''}"


def _holds(source: str, suffix: str, observed: np.ndarray | None) -> bool:
    """Whether the file ``source`` (with its ``['key']`` suffix) still holds an array of the
    loaded observation's shape — not so when it is gone, or when the loaded one lost a leading
    axis of 1 (:meth:`~kestrel_core.Graph.fit_observation`)."""
    if not os.path.isfile(source):
        return False
    if observed is None:  # not loaded: nothing to compare, the file is the observation
        return True
    try:
        return np.shape(load_observation(source + suffix)) == np.shape(observed)
    except KestrelError:
        return False


def save_observations(config: RunConfig, run_root: str | os.PathLike[str]) -> dict[str, str]:
    """Copy each observation of ``config`` into ``RUN/observations/``.

    A file observation is copied as it is (an ``.npz`` keeps its other arrays, e.g. the
    ``<node>_true`` values ``kestrel plot`` marks); an in-memory one, one whose file is
    gone, or one whose loaded array has another shape than the file's (a ``(1, *D)`` file
    fitted to ``D`` by the dry run) is saved from the loaded array as
    ``<node>.npy``. A file already in place is kept.

    Args:
        config: the run's config (observations already loaded).
        run_root: the run directory.

    Returns:
        node → its ``observed`` spec relative to the run (``"observations/x.npz['x']"``).

    Raises:
        OSError: the folder or a file cannot be written.
    """
    root = os.path.abspath(os.fspath(run_root))
    specs: dict[str, str] = {}
    for name, (source, suffix) in _observation_sources(config).items():
        if source is not None and not _holds(source, suffix, config.graph.nodes[name].observed):
            source, suffix = None, ""
        spec = _observation_spec(name, source, suffix)
        target = os.path.join(root, *spec.split("[")[0].strip().split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if source is None:
            tmp = target + ".tmp.npy"
            np.save(tmp, np.asarray(config.graph.nodes[name].observed), allow_pickle=False)
            os.replace(tmp, target)
        elif not (os.path.exists(target) and os.path.samefile(source, target)):
            shutil.copyfile(source, target + ".tmp")
            os.replace(target + ".tmp", target)
        specs[name] = spec
    return specs


def portable_config(
    config: RunConfig, run_root: str | os.PathLike[str], observed: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``config.to_dict()`` as written to ``RUN/config.yml`` (see the module docstring).

    Args:
        config: the run's config.
        run_root: the run directory.
        observed: node → ``observed`` spec inside the run (from :func:`save_observations`);
            ``None`` uses the names :func:`save_observations` would give.

    Returns:
        Plain containers (YAML-safe).
    """
    root = os.path.abspath(os.fspath(run_root))
    data = config.to_dict()
    data.pop("run_dir", None)
    paths = dict(data.get("paths") or {})
    for name in _RUN_PATHS:
        value = paths.get(name)
        if not isinstance(value, str):
            continue
        rel = _inside(value, root)
        if rel == name:
            del paths[name]
        elif rel is not None:
            paths[name] = "${run_dir}/" + rel
    imports = paths.get("imports")
    if isinstance(imports, list):
        both: list[str] = []
        for folder in imports:
            rel = os.path.relpath(folder, root).replace(os.sep, "/")
            both += [v for v in (folder, rel) if v not in both]
        paths["imports"] = both
    data["paths"] = paths
    buffer = data.get("buffer")
    if isinstance(buffer, dict) and isinstance(buffer.get("initial_samples_path"), str):
        rel = _inside(buffer["initial_samples_path"], root)
        if rel is not None:
            buffer["initial_samples_path"] = rel
    if observed is None:
        observed = {n: _observation_spec(n, *s) for n, s in _observation_sources(config).items()}
    for name, spec in observed.items():
        data["graph"][name]["observed"] = spec
    return data


def run_config_yaml(data: Mapping[str, Any], *, sort_keys: bool = False) -> str:
    """``data`` as YAML (``sort_keys=True`` gives the canonical text of :func:`config_digest`)."""
    import yaml

    return yaml.safe_dump(dict(data), sort_keys=sort_keys, allow_unicode=True)


def config_digest(data: Mapping[str, Any]) -> str:
    """sha256 of the canonical YAML of a portable config, ``paths.imports`` left out (where
    the code lies is not part of what the run is)."""
    data = dict(data)
    data["paths"] = {k: v for k, v in (data.get("paths") or {}).items() if k != "imports"}
    return text_digest(run_config_yaml(data, sort_keys=True))


def observation_digests(config: RunConfig) -> dict[str, str]:
    """node → :func:`~kestrel_core.config._diff.array_digest` of its observation."""
    return {name: array_digest(obs) for name, obs in config.graph.observations.items()}


def run_config_changes(
    old: RunConfig, new: RunConfig, run_root: str | os.PathLike[str]
) -> list[Change]:
    """What differs between a run's recorded config and a new one, as dotted keys.

    The configs are compared in their portable form (so where the run, the code and the data
    files lie does not count); observations are compared by their values.
    """
    changes = config_changes(
        portable_config(old, run_root), portable_config(new, run_root), ignore=_IGNORED
    )
    before = observation_digests(old)
    mine = old.graph.observations
    after = {  # a (1, *D) observation is the run's D one (fitted at the launch's dry run)
        name: array_digest(obs[0] if name in mine and obs.shape == (1, *mine[name].shape) else obs)
        for name, obs in new.graph.observations.items()
    }
    for name in list(before) + [n for n in after if n not in before]:
        if before.get(name) != after.get(name):
            changes.append(Change(f"graph.{name}.observed", _data(old, name), _data(new, name)))
    return changes


class _Data:
    """An observation as a :class:`Change` shows it: shape, dtype and digest."""

    def __init__(self, obs: np.ndarray):
        self.text = f"data {tuple(obs.shape)} {obs.dtype} sha256 {array_digest(obs)[:12]}"

    def __str__(self) -> str:
        return self.text


def _data(config: RunConfig, name: str) -> Any:
    obs = config.graph.observations.get(name)
    return MISSING if obs is None else _Data(obs)


def _rebase(value: Any, old_root: str) -> Any:
    """Strings under ``old_root`` rewritten as ``${run_dir}/…`` (older run configs)."""
    if isinstance(value, dict):
        return {k: _rebase(v, old_root) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebase(v, old_root) for v in value]
    if isinstance(value, str) and (value == old_root or value.startswith(old_root + os.sep)):
        return "${run_dir}" + value[len(old_root) :].replace(os.sep, "/")
    return value


def _import_groups(imports: list[str]) -> list[list[str]]:
    """``paths.imports`` as :func:`portable_config` wrote them: each absolute folder followed
    by the same folder relative to the run; an entry without its pair stands alone."""
    groups: list[list[str]] = []
    for folder in imports:
        rel = not os.path.isabs(os.path.expanduser(folder))
        if rel and groups and len(groups[-1]) == 1 and os.path.isabs(groups[-1][0]):
            groups[-1].append(folder)
        else:
            groups.append([folder])
    return groups


def _existing_imports(imports: Any, root: str) -> Any:
    """The code folders of ``paths.imports`` as the run at ``root`` finds them, deduplicated.

    Of a folder recorded both absolute and relative to the run, the relative one is used when
    it exists (a copied or moved project uses its own copy of the code, never the original's
    through the absolute path), else the absolute one; folders that exist neither way are
    left out — all of them are kept when none exists (so the import error names them).
    """
    if not isinstance(imports, list) or not all(
        isinstance(d, str) and "${" not in d for d in imports
    ):
        return imports

    def full(folder: str) -> str:
        return os.path.normpath(os.path.join(root, os.path.expanduser(folder)))

    found: list[str] = []
    every: list[str] = []
    for group in _import_groups(imports):
        paths = [full(d) for d in reversed(group)]  # the run-relative entry first
        every += [p for p in paths if p not in every]
        chosen = next((p for p in paths if os.path.isdir(p)), None)
        if chosen is not None and chosen not in found:
            found.append(chosen)
    return found or every


def _check_observation_files(data: Mapping[str, Any], root: str, overrides: Iterable[str]) -> None:
    """Each observation file the run's config names reads in full (a copy cut short is named
    with its remedy, not left to numpy's traceback); a node whose ``observed`` an override
    replaces is skipped."""
    replaced = {o.split("=", 1)[0].strip() for o in overrides if isinstance(o, str)}
    graph = data.get("graph")
    for name, node in graph.items() if isinstance(graph, Mapping) else ():
        spec = node.get("observed") if isinstance(node, Mapping) else None
        if not isinstance(spec, str) or f"graph.{name}.observed" in replaced:
            continue
        file, _ = split_observation_spec(spec)
        full = os.path.normpath(os.path.join(root, os.path.expanduser(file)))
        if os.path.isfile(full):  # a missing file is load_config's to report
            read_array_file(full, observation_remedy(root, str(name)))


def load_run_config(
    run_root: str | os.PathLike[str],
    overrides: Iterable[str] = (),
    *,
    check_targets: Sequence[str] = ("simulator",),
    trust: bool | None = None,
) -> RunConfig:
    """Load ``RUN/config.yml`` for the directory it lies in (wherever that is now).

    Args:
        run_root: the run directory (``~`` expanded).
        overrides: dotlist overrides (as :func:`~kestrel_core.load_config`).
        check_targets: as :func:`~kestrel_core.load_config`.
        trust: whether the user trusts the run (:mod:`kestrel.rundir._trust`); ``None``: as
            the command says (:func:`~kestrel.rundir._trust.is_trusted`), else not: the
            config may then use only Kestrel's config classes and its code folders' code
            (``trust=False`` of :func:`~kestrel_core.load_config`).

    Returns:
        The config, ``run_dir`` set to ``run_root``, relative paths resolved against it.

    Raises:
        ConfigError: no ``config.yml`` there, or as :func:`~kestrel_core.load_config`.
        RunFileError: (a ConfigError) ``config.yml`` or one of the run's observation files is
            empty, damaged or cut short: one line naming the file, what is wrong, the remedy.
            Untrusted: a target or ``ray`` setting the config may not use, naming the file
            and the target, before anything is imported.
        GraphError: as :func:`~kestrel_core.load_config`.
    """
    root = os.path.abspath(os.path.expanduser(os.fspath(run_root)))
    path = os.path.join(root, RUN_CONFIG_FILE)
    data = read_yaml(path, config_remedy(root)) if os.path.isfile(path) else None
    if data is None:
        raise ConfigError(f"{root}: not a run directory (no {RUN_CONFIG_FILE})")
    _check_observation_files(data, root, overrides)
    recorded = data.pop("run_dir", None)
    if isinstance(recorded, str) and os.path.isabs(recorded):
        data = _rebase(data, os.path.normpath(recorded))
    paths = data.get("paths")
    if isinstance(paths, dict) and "imports" in paths:
        paths["imports"] = _existing_imports(paths["imports"], root)
    return load_config(
        data,
        overrides,
        run_dir=root,
        check_targets=check_targets,
        base_dir=root,
        trust=is_trusted(root) if trust is None else trust,
        origin=path,
    )
