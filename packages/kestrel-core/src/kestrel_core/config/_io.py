"""Reading, overriding and resolving a config with OmegaConf (helpers of ``_config``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from kestrel_core._errors import ConfigError
from kestrel_core.config._instantiate import TARGET, target_name
from kestrel_core.config._resolvers import register_resolvers
from kestrel_core.config._schema import override_problem, split_key_path
from kestrel_core.graph._observe import absolute_observation_spec
from kestrel_core.program._program import PROGRAM_TARGETS, absolute_program_paths

__all__ = ["read_source", "apply_override", "resolve", "yamlable"]

_MISSING = "???"
_FLAGS = {"allow_objects": True}


def _first_line(err: Exception) -> str:
    text = getattr(err, "msg", None) or str(err)
    return str(text).strip().splitlines()[0] if str(text).strip() else type(err).__name__


def read_source(source: Any) -> tuple[Any, str]:
    """A fresh DictConfig of ``source`` (never aliasing it) and the base directory.

    A mapping whose ``graph`` is a :class:`~kestrel_core.Graph` (built in Python) holds that
    graph's config, as its YAML would say it (:func:`kestrel_core.graph._record.graph_section`);
    its base directory is the Graph's ``base_dir`` when set.

    Raises:
        ConfigError: the file is missing or not valid YAML, or the source is not a mapping (a
            Graph alone: naming the remedy); a graph that cannot be recorded (a class defined
            in ``__main__``, a live object other than a kestrel-core prior, …).
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    source_pair = getattr(source, "_source", None)
    if (
        isinstance(source_pair, tuple)
        and len(source_pair) == 2
        and isinstance(source_pair[0], DictConfig)
    ):
        return source_pair[0].copy(), source_pair[1]
    if isinstance(source, (str, os.PathLike)):
        path = os.path.abspath(os.path.expanduser(os.fspath(source)))
        if not os.path.isfile(path):
            raise ConfigError(f"config file not found: {path}")
        try:
            cfg = OmegaConf.load(path)
        except Exception as err:  # yaml.YAMLError and OmegaConf errors
            raise ConfigError(f"config file {path} is not valid YAML: {err}") from err
        if isinstance(cfg, ListConfig):
            raise ConfigError(
                f"config file {path}: expected a mapping at the top level, found a list"
            )
        if len(cfg) == 0:
            raise ConfigError(
                f"config file {path} is empty (nothing but blank lines or comments); a config "
                "needs at least a graph section (graph: <node>: simulator: ...)"
            )
        return cfg, os.path.dirname(path)
    if isinstance(source, DictConfig):
        source = OmegaConf.to_container(source, resolve=False)
    from kestrel_core.graph._graph import Graph

    if not isinstance(source, Mapping):
        if isinstance(source, Graph):
            raise ConfigError(
                "config: a Graph is the config's graph section; give the config as a mapping "
                "holding it: {'graph': graph, 'buffer': {...}, 'sample': {...}}"
            )
        raise ConfigError(
            f"config: expected a YAML path, mapping or DictConfig, found {type(source).__name__}"
        )
    base_dir = os.getcwd()
    graph = source.get("graph")
    if isinstance(graph, Graph):  # built in Python: the config its YAML would be
        from kestrel_core.graph._record import graph_section

        source = {**source, "graph": graph_section(graph, None)}
        if graph.base_dir is not None:
            base_dir = os.path.abspath(graph.base_dir)
    try:
        cfg = OmegaConf.create(dict(source), flags=_FLAGS)
    except OmegaConfBaseException as err:
        raise ConfigError(f"config: {_first_line(err)}") from err
    return cfg, base_dir


def _parse_value(text: str) -> Any:
    from omegaconf import OmegaConf

    parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"v={text}"]), resolve=False)
    return cast(dict, parsed)["v"]


def apply_override(cfg: Any, item: Any, nodes: list[str]) -> None:
    """Apply one dotlist override ``"key.path=value"`` to ``cfg`` in place.

    A node whose ``simulator``/``estimator`` is a plain ``_target_`` string is turned into
    ``{_target_: …}`` first when an override sets a kwarg beneath it.

    Raises:
        ConfigError: not ``key=value``, or the key is not in the schema (with a suggestion).
    """
    import yaml
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(item, str) or "=" not in item:
        raise ConfigError(f"override {item!r}: expected key=value, e.g. buffer.min_samples=64")
    key, text = item.split("=", 1)
    key = key.strip()
    parts = split_key_path(key)
    problem = override_problem(parts, nodes)
    if problem:
        raise ConfigError(f"override {item!r}: {problem}")
    try:
        value = _parse_value(text)
        _check_flow_mapping(item, value)
        if len(parts) > 3 and parts[0] == "graph" and parts[2] in ("simulator", "estimator"):
            node = cfg.graph[parts[1]]
            if isinstance(node, DictConfig) and isinstance(node.get(parts[2]), str):
                node[parts[2]] = {"_target_": node[parts[2]]}
        OmegaConf.update(cfg, key, value, merge=False)
    except yaml.YAMLError as err:
        hint = f"; {_COLON_HINT}" if _GLUED_COLON.search(text) else ""
        raise ConfigError(
            f"override {item!r}: the value is not valid YAML ({_first_line(err)}){hint}"
        ) from None
    except OmegaConfBaseException as err:
        raise ConfigError(f"override {item!r}: {_first_line(err)}") from err


#: ``{key:value}`` without a space: YAML reads ``key:value`` as one key
_GLUED_COLON = re.compile(r"[{,]\s*[^\s{},:]+:[^\s]")
_COLON_HINT = "write a space after each ':' of a mapping, e.g. {num_gpus: 1}"


def _check_flow_mapping(item: str, value: Any) -> None:
    """Refuse a mapping that YAML read from ``{key:value}`` (no space after the colon): a key
    holding ``:`` whose value is null."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, sub in v.items():
                if isinstance(k, str) and ":" in k and sub is None:
                    raise ConfigError(f"override {item!r}: key {k!r} has no value; {_COLON_HINT}")
                stack.append(sub)
        elif isinstance(v, list):
            stack.extend(v)


def _resolve_node(cfg: Any, key: str, run_dir_missing: bool) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        node = cfg[key]
        if isinstance(node, (DictConfig, ListConfig)):
            return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
        if isinstance(node, str) and node == _MISSING:
            raise ConfigError(f"{key}: missing mandatory value (???)")
        return node
    except OmegaConfBaseException as err:
        where = getattr(err, "full_key", None) or key
        msg = _first_line(err)
        if run_dir_missing and "run_dir" in msg:
            msg = "uses ${run_dir}, but no run directory was given"
        elif "Missing mandatory value" in msg and "interpolation" not in msg:
            msg = "missing mandatory value (???)"
        raise ConfigError(f"{where}: {msg}") from err


def resolve(cfg: Any, run_dir: Any, base_dir: str) -> dict[str, Any]:
    """Inject ``run_dir`` and path defaults, resolve interpolations, absolutise file paths.

    Paths under ``paths`` that need ``${run_dir}`` become ``None`` when no run directory is
    given; any other use of it is an error. ``cfg`` is modified (pass a copy).

    Raises:
        ConfigError: an interpolation fails or a ``???`` value is left, naming the key path.
    """
    from omegaconf import DictConfig, OmegaConf

    register_resolvers()  # ${calc:...}, ${sqrt:...}, ${exp:...}, ${log:...}
    if run_dir is not None:
        cfg["run_dir"] = os.path.expanduser(os.fspath(run_dir))
    elif "run_dir" not in cfg or (not OmegaConf.is_missing(cfg, "run_dir") and cfg.run_dir is None):
        cfg["run_dir"] = _MISSING
    missing = OmegaConf.is_missing(cfg, "run_dir")
    if cfg.get("paths") is None:
        cfg["paths"] = {}
    if isinstance(cfg.paths, DictConfig):
        for name in ("graph", "samples", "buffer"):
            if name not in cfg.paths:
                cfg.paths[name] = "${run_dir}/" + name
        if "imports" not in cfg.paths:
            cfg.paths["imports"] = [base_dir]
    data: dict[str, Any] = {}
    for key in map(str, cfg):
        if key == "run_dir":
            data[key] = None if missing else _resolve_node(cfg, key, False)
        elif key == "paths" and isinstance(cfg.paths, DictConfig):
            paths = {}
            for name in map(str, cfg.paths):
                try:
                    paths[name] = _resolve_node(cfg.paths, name, missing)
                except ConfigError:
                    if not missing or name == "imports":
                        raise
                    paths[name] = None
            data[key] = paths
        else:
            data[key] = _resolve_node(cfg, key, missing)
    _absolutise(data, base_dir)
    return data


def _absolutise(data: dict[str, Any], base_dir: str) -> None:
    """Expand ``~`` in every path of the config (as a shell does: never a folder named ``~``)
    and make ``paths.imports``, ``reuse``, ``buffer.initial_samples_path``, ``observed`` and the paths of a
    :class:`~kestrel_core.Program` simulator (its program, ``cwd``, ``scratch``) absolute."""
    if isinstance(data.get("run_dir"), str):
        data["run_dir"] = os.path.expanduser(data["run_dir"])
    paths = data.get("paths")
    if isinstance(paths, dict):
        for name in ("graph", "samples", "buffer"):
            if isinstance(paths.get(name), str):
                paths[name] = os.path.expanduser(paths[name])
        imports = paths.get("imports")
        if isinstance(imports, str):
            imports = [imports]
        if isinstance(imports, list) and all(isinstance(d, str) for d in imports):
            paths["imports"] = [
                os.path.normpath(os.path.join(base_dir, os.path.expanduser(d))) for d in imports
            ]
    reuse = data.get("reuse")  # earlier runs whose simulation banks a new run starts from
    if isinstance(reuse, str):
        reuse = [reuse]
    if isinstance(reuse, list) and all(isinstance(r, str) for r in reuse):
        data["reuse"] = [
            os.path.normpath(os.path.join(base_dir, os.path.expanduser(r))) for r in reuse
        ]
    buf = data.get("buffer")
    if isinstance(buf, dict) and isinstance(buf.get("initial_samples_path"), str):
        buf["initial_samples_path"] = os.path.normpath(
            os.path.join(base_dir, os.path.expanduser(buf["initial_samples_path"]))
        )
    graph = data.get("graph")
    if isinstance(graph, dict):
        for node in graph.values():
            if isinstance(node, dict) and isinstance(node.get("observed"), str):
                node["observed"] = absolute_observation_spec(node["observed"], base_dir)
            sim = node.get("simulator") if isinstance(node, dict) else None
            if isinstance(sim, dict) and sim.get(TARGET) in PROGRAM_TARGETS:
                absolute_program_paths(sim, base_dir)  # command, cwd, scratch


def yamlable(obj: Any) -> Any:
    """A copy of ``obj`` holding only YAML-safe values (see :meth:`RunConfig.to_dict`)."""
    if isinstance(obj, Mapping):
        return {str(k): yamlable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [yamlable(v) for v in obj]
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return f"<array shape {tuple(obj.shape)} {obj.dtype}>"
    return target_name(obj)
