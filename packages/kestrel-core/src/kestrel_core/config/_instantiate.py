"""``_target_`` specs to objects: import a dotted path, instantiate nested specs, check kwargs.

A *target spec* is a mapping ``{"_target_": "pkg.mod.Name", **kwargs}``. :func:`instantiate`
builds it (kwargs first, recursively), :func:`import_target` resolves the dotted path and
:func:`argument_problems` checks kwargs against the constructor's signature so that a typo is
reported at config load rather than inside an actor. A mapping holding ``_input_`` is an
embedding spec for kestrel-torch and is left untouched.

The ``imports`` directories of a config (``paths.imports``, by default the config file's
folder) are moved to the front of :data:`sys.path` before a target is imported and stay there,
so user code can import its siblings later. If a module of the same top-level name was already
imported from elsewhere (``model`` of another example), it is evicted from :data:`sys.modules`
so the one next to the config is used; objects built from the old module keep working.

A config whose code folder is gone (a run whose model folder was moved away) never takes the
module of a target from the folders Python puts on :data:`sys.path` only because of how it
was started — the working directory (``''``: the REPL, ``python -c``, ``python -``) and the
folder of the ``python script.py`` being run: a ``model.py`` there is not the run's code. The
``kestrel`` command never has those folders on its path; the Python API now fails the same
way ("no module named 'model'"), naming the missing folder.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kestrel_core._errors import ConfigError
from kestrel_core.config._suggest import did_you_mean, key_path

__all__ = ["import_target", "instantiate", "argument_problems", "is_target_spec", "target_name"]

TARGET = "_target_"
INPUT = "_input_"
_LOCK = threading.RLock()


def is_target_spec(obj: Any) -> bool:
    """Whether ``obj`` is a mapping with ``_target_`` that :func:`instantiate` would build."""
    return isinstance(obj, Mapping) and TARGET in obj and INPUT not in obj


def target_name(target: Any) -> str:
    """Display name of a target: the dotted path, ``module.Qualname`` of a class or function,
    ``<module.Class instance>`` of a live object."""
    if isinstance(target, str):
        return target
    if inspect.isclass(target) or inspect.isfunction(target):
        return f"{target.__module__}.{target.__qualname__}"
    cls = type(target)
    return f"<{cls.__module__}.{cls.__qualname__} instance>"


def _prepare_imports(top: str, imports: Iterable[str]) -> None:
    dirs = [os.path.abspath(os.fspath(d)) for d in imports]
    if not dirs:
        return
    for d in reversed(dirs):
        while d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
    loaded = sys.modules.get(top)
    if loaded is None:
        return
    for d in dirs:
        candidates = [os.path.join(d, top + ".py"), os.path.join(d, top, "__init__.py")]
        local = next((c for c in candidates if os.path.isfile(c)), None)
        if local is None:
            continue
        current = getattr(loaded, "__file__", None)
        if current is None or os.path.abspath(current) != local:
            for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
                del sys.modules[name]
        return


def _implicit_dirs() -> list[str]:
    """The folders on :data:`sys.path` only because of how Python was started (real paths):
    the working directory for a ``''``/``'.'`` entry, and the folder of the ``python
    script.py`` being run (Python's ``sys.path[0]``; not for ``python -m``)."""
    out = []
    if any(entry in ("", os.curdir) for entry in sys.path):
        out.append(os.path.realpath(os.getcwd()))
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if isinstance(script, str) and getattr(main, "__spec__", None) is None:
        folder = os.path.realpath(os.path.dirname(os.path.abspath(script)))
        if any(entry and os.path.realpath(entry) == folder for entry in sys.path):
            out.append(folder)
    return out


def _module_folder(origin: str | None, is_package: bool) -> str | None:
    if not origin:
        return None
    folder = os.path.dirname(os.path.realpath(origin))
    return os.path.dirname(folder) if is_package else folder


def _shadow(top: str, dirs: list[str]) -> str | None:
    """The file module ``top`` would come from when one of the code folders ``dirs`` is gone
    and the module is found only in an implicit folder (:func:`_implicit_dirs`) that is not
    one of ``dirs`` — a stand-in for the missing code; ``None`` otherwise."""
    import importlib.machinery
    import importlib.util

    if all(os.path.isdir(d) for d in dirs):
        return None
    mine = {os.path.realpath(d) for d in dirs}
    implicit = [d for d in _implicit_dirs() if d not in mine]
    if not implicit:
        return None
    try:
        if importlib.machinery.PathFinder.find_spec(top, dirs) is not None:
            return None  # the config's own folders hold it (and come first)
        loaded = sys.modules.get(top)
        if loaded is not None:
            origin = getattr(loaded, "__file__", None)
            is_package = hasattr(loaded, "__path__")
        else:
            spec = importlib.util.find_spec(top)
            if spec is None or not spec.has_location:
                return None
            origin, is_package = spec.origin, spec.submodule_search_locations is not None
    except (ImportError, ValueError):
        return None
    return origin if _module_folder(origin, is_package) in implicit else None


def import_target(path: str, imports: Iterable[str] = ()) -> Any:
    """Import the object named by a dotted path such as ``"model.Signal"``.

    Args:
        path: ``"module.attr"`` or ``"pkg.mod.Class.attr"``; the longest importable module
            prefix is imported and the rest looked up as attributes.
        imports: directories moved to the front of :data:`sys.path` first.

    Returns:
        The object (class, function, …).

    Raises:
        ConfigError: ``path`` is not a dotted path, no prefix of it is an importable module, the
            module failed to import (its error text is included), or an attribute is missing
            (with a suggestion).

    Example:
        >>> import_target("collections.OrderedDict").__name__
        'OrderedDict'
    """
    if not isinstance(path, str) or not path or "." not in path.strip("."):
        raise ConfigError(f"target {path!r} must be a dotted path 'module.Name'")
    parts = path.split(".")
    if any(not p.isidentifier() for p in parts):
        raise ConfigError(f"target {path!r} must be a dotted path of identifiers 'module.Name'")
    imports = [os.fspath(d) for d in imports]
    with _LOCK:
        _prepare_imports(parts[0], imports)
        shadow = _shadow(parts[0], [os.path.abspath(d) for d in imports]) if imports else None
        if shadow is not None:
            gone = [d for d in imports if not os.path.isdir(d)]
            folders = "folder " if len(gone) == 1 else "folders "
            raise ConfigError(
                f"cannot import {path!r}: no module named {parts[0]!r}; the code {folders}"
                f"{', '.join(gone)} (paths.imports) {'is' if len(gone) == 1 else 'are'} gone, "
                f"and {shadow}, found only through the folder Python was started from, is not "
                "the config's code"
            )
        module, used = None, 0
        for i in range(len(parts) - 1, 0, -1):
            name = ".".join(parts[:i])
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as err:
                if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
                    continue
                raise ConfigError(
                    f"cannot import {path!r}: module {name!r} needs {err.name!r}, which is not installed"
                ) from err
            except Exception as err:  # the user's module raised while importing
                raise ConfigError(
                    f"cannot import {path!r}: importing module {name!r} raised "
                    f"{type(err).__name__}: {err}"
                ) from err
            used = i
            break
    if module is None:
        where = f"; searched imports {list(imports)} and sys.path" if imports else ""
        raise ConfigError(f"cannot import {path!r}: no module named {parts[0]!r}{where}")
    obj: Any = module
    for j in range(used, len(parts)):
        try:
            obj = getattr(obj, parts[j])
        except AttributeError:
            owner = ".".join(parts[:j])
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ConfigError(
                f"cannot import {path!r}: {owner!r} has no attribute {parts[j]!r}"
                + did_you_mean(parts[j], names)
            ) from None
    return obj


def _call(target: Any, kwargs: dict[str, Any], imports: Iterable[str]) -> Any:
    if isinstance(target, str):
        target = import_target(target, imports)
    if not callable(target):
        raise ConfigError(f"target {target_name(target)} is not callable")
    return target(**kwargs)


def instantiate(obj: Any, imports: Iterable[str] = ()) -> Any:
    """Build every ``_target_`` mapping inside ``obj``, innermost first.

    Args:
        obj: a target spec ``{"_target_": ..., **kwargs}``, a mapping or list containing such
            specs (recursed; OmegaConf containers are converted to plain ones first), or any
            other value (returned as is). Mappings holding ``_input_`` are returned untouched.
            ``_target_`` may be a dotted path, a class or a function.
        imports: directories for :func:`import_target`.

    Returns:
        The built object; containers are new plain ``dict``/``list``/``tuple`` objects, so the
        input is never modified.

    Raises:
        ConfigError: a target cannot be imported or is not callable. Exceptions raised by a
            constructor propagate unchanged.

    Example:
        >>> instantiate({"_target_": "fractions.Fraction", "numerator": 3, "denominator": 6})
        Fraction(1, 2)
    """
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(obj, (DictConfig, ListConfig)):
        obj = OmegaConf.to_container(obj, resolve=True)
    if isinstance(obj, Mapping):
        if INPUT in obj:
            return obj
        if TARGET in obj:
            kwargs = {str(k): instantiate(v, imports) for k, v in obj.items() if k != TARGET}
            return _call(obj[TARGET], kwargs, imports)
        return {k: instantiate(v, imports) for k, v in obj.items()}
    if isinstance(obj, list):
        return [instantiate(v, imports) for v in obj]
    if isinstance(obj, tuple):
        return tuple(instantiate(v, imports) for v in obj)
    return obj


def argument_problems(target: Any, kwargs: Mapping[str, Any], where: str) -> list[str]:
    """Check config kwargs against the signature of ``target`` (a class or function).

    Args:
        target: the imported callable.
        kwargs: the keyword arguments the config gives it.
        where: key path of the spec, e.g. ``"graph.x.simulator"``.

    Returns:
        One message per problem: ``"graph.x.simulator.sigmaa: unexpected argument (did you
        mean 'sigma'?)"`` or ``"graph.x.simulator: missing required argument 'sigma'"``. Empty
        when the signature accepts ``**kwargs`` or cannot be inspected.

    Example:
        >>> def noise(sigma=0.1): ...
        >>> argument_problems(noise, {"sigmaa": 1}, "graph.x.simulator")
        ["graph.x.simulator.sigmaa: unexpected argument (did you mean 'sigma'?)"]
    """
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p.name for p in params.values() if p.kind in kinds]
    problems = []
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        for key in kwargs:
            if key not in named:
                problems.append(
                    f"{key_path(where, key)}: unexpected argument{did_you_mean(key, named)}"
                )
    for p in params.values():
        if p.default is not inspect.Parameter.empty or p.name in kwargs:
            continue
        if p.kind in kinds or p.kind is inspect.Parameter.POSITIONAL_ONLY:
            problems.append(
                f"{where}: missing required argument {p.name!r} of {target_name(target)}"
            )
    return problems
