"""A graph built in Python, written as the config it stands for (the YAML record).

:meth:`~kestrel_core.Graph.to_config`, :meth:`~kestrel_core.Graph.to_yaml` and
:meth:`~kestrel_core.Graph.save` turn each node back into the config value a YAML file would
hold, so that launching the Python graph and launching its YAML are the same launch:

- a class or function becomes its import path ``module.QualName`` — refused (naming the node
  and the remedy) when that path does not import it back: a class defined in ``__main__``
  (a notebook, a script), inside a function, a lambda;
- a live object becomes its own config when it can say it (``to_config()``: the priors
  :class:`~kestrel_core.Product` and :class:`~kestrel_core.MultivariateNormal`); any other
  live object is refused (its constructor arguments are not known): give the class and its
  arguments instead, ``(model.Noise, {"sigma": 0.1})``;
- constructor arguments become YAML values: numpy arrays and scalars become lists and
  numbers, tuples lists; any other object is refused, naming its key path.

Only conversions live here: the checks of values, of the graph's structure and of the
targets' arguments are :func:`~kestrel_core.load_config`'s, which every config of a Python
graph goes through.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError
from kestrel_core.config._instantiate import INPUT, TARGET, import_target, target_name
from kestrel_core.config._suggest import key_path
from kestrel_core.graph._spec import Spec

__all__ = ["importable_name", "record_spec", "record_value", "graph_section", "observed_file"]

_REMEDY = (
    "a run's config.yml names classes by their import path; put it in a module next to the "
    "notebook or script (e.g. model.py) and import it from there"
)


def importable_name(target: Any, where: str) -> str:
    """``module.QualName`` of a class or function, checked to import back to ``target``.

    Raises:
        ConfigError: ``target`` is defined in ``__main__``, inside a function, is a lambda, or
            its path imports another object (the message names ``where`` and the remedy).
    """
    module = getattr(target, "__module__", None)
    qualname = str(getattr(target, "__qualname__", None) or getattr(target, "__name__", "?"))
    name = f"{module}.{qualname}"
    what = "class" if inspect.isclass(target) else "function"
    if "<lambda>" in qualname:
        why = f"{name} is a lambda (it has no import path)"
    elif module in (None, "__main__", "__mp_main__"):
        why = f"{what} {qualname} is defined in the notebook or script itself (__main__)"
    elif "<locals>" in qualname:
        why = f"{what} {name} is defined inside a function"
    else:
        try:
            back = import_target(name)
        except ConfigError:
            back = None
        if back is target:
            return name
        why = f"{what} {name} does not import back by that path"
    raise ConfigError(f"{where}: {why}; {_REMEDY}")


def _is_factory(obj: Any) -> bool:
    return inspect.isclass(obj) or inspect.isfunction(obj)


def _own_config(obj: Any, where: str) -> Any:
    """The config a live object gives of itself (``to_config()``), recorded; or refused."""
    own = getattr(obj, "to_config", None)
    if callable(own) and not _is_factory(obj):
        value = own()
        if isinstance(value, Mapping) and TARGET in value:
            return record_value(value, where)
    cls = type(obj)
    raise ConfigError(
        f"{where}: a live {cls.__module__}.{cls.__qualname__} instance cannot be recorded in "
        "the YAML (its constructor arguments are not known); give the class and its "
        f"arguments instead: ({cls.__qualname__}, {{...}}) or "
        f"kestrel_core.Spec({cls.__qualname__}, {{...}})"
    )


def record_spec(spec: Spec, where: str) -> Any:
    """The config value of a simulator or estimator: ``"module.Name"`` or
    ``{"_target_": "module.Name", **kwargs}`` (plain YAML values).

    Raises:
        ConfigError: as :func:`importable_name`, a live object that gives no config of its
            own, a kwarg that is no YAML value (each naming its key path).
    """
    if spec.is_live:
        return _own_config(spec.target, where)
    target = spec.target if isinstance(spec.target, str) else importable_name(spec.target, where)
    if not spec.kwargs:
        return target
    kwargs = {k: record_value(v, key_path(where, k)) for k, v in spec.kwargs.items()}
    return {TARGET: target, **kwargs}


def record_value(value: Any, where: str) -> Any:
    """A constructor argument as a YAML value (see the module docstring).

    Raises:
        ConfigError: an object YAML cannot hold, naming ``where``.
    """
    if isinstance(value, (np.ndarray, np.generic)):  # (np.float64 is a float: first)
        return value.tolist()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Spec):
        return record_spec(value, where)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{where}: key {k!r} is not a string (YAML keys here are names)")
            inner = key_path(where, k)
            if k == TARGET and INPUT not in value:
                out[k] = v if isinstance(v, str) else importable_name(v, inner)
            else:
                out[k] = record_value(v, inner)
        return out
    if isinstance(value, (list, tuple)):
        return [record_value(v, key_path(where, i)) for i, v in enumerate(value)]
    if _is_factory(value):
        raise ConfigError(
            f"{where}: {target_name(value)} is a class or function; a config gives an object to "
            f"build as {{'_target_': {target_name(value)!r}, ...its arguments}}"
        )
    if callable(getattr(value, "to_config", None)):
        return _own_config(value, where)
    raise ConfigError(
        f"{where}: a value of type {type(value).__qualname__} cannot be written in YAML; give "
        "numbers, strings, "
        "lists, mappings or numpy arrays (a nested object as {'_target_': 'module.Class', ...})"
    )


def observed_file(node: str) -> str:
    """The file name an observation given as an array is saved under beside a YAML record."""
    return f"observed_{node}.npy"


def _relative(path: str, folder: str | None) -> str:
    if folder is None:
        return path
    rel = os.path.relpath(path, folder)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return path
    return rel.replace(os.sep, "/")


def graph_section(graph: Any, folder: str | None) -> dict[str, Any]:
    """The ``graph`` section of ``graph``'s config, defaults left out.

    Args:
        graph: the :class:`~kestrel_core.Graph` (not imported here: it imports this module).
        folder: ``None``: observations given as arrays stay arrays and files are named by
            absolute paths (a config for :func:`~kestrel_core.load_config` in this process);
            a folder: the YAML's, whose arrays are named :func:`observed_file` and whose files
            inside it are named relative to it.

    Raises:
        ConfigError: as :func:`record_spec`.
    """
    from kestrel_core.graph._observe import split_observation_spec

    section: dict[str, Any] = {}
    for name, node in graph.nodes.items():
        where = f"graph.{name}"
        entry: dict[str, Any] = {"simulator": record_spec(node.simulator, f"{where}.simulator")}
        for key in ("parents", "evidence", "scaffolds"):
            if getattr(node, key):
                entry[key] = list(getattr(node, key))
        if node.estimator is not None:
            entry["estimator"] = record_spec(node.estimator, f"{where}.estimator")
        if node.observed is not None:
            source = graph.observed_source(name)
            if source is not None:
                path, suffix = split_observation_spec(source)
                entry["observed"] = _relative(path, folder) + suffix
            elif folder is None:
                entry["observed"] = node.observed
            else:
                entry["observed"] = observed_file(name)
        defaults = (
            ("num_actors", 1),
            ("sample_chunk_size", 0),
            ("on_error", "raise"),
            ("dry_run", True),
            ("timeout", None),
        )
        for key, default in defaults:
            if getattr(node, key) != default:
                entry[key] = getattr(node, key)
        if node.auto_actors:
            entry["num_actors"] = "auto"
        if node.ray:
            entry["ray"] = record_value(node.ray, f"{where}.ray")
        if node.names:
            entry["names"] = list(node.names)
        section[name] = entry
    return section
