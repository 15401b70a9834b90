"""Load-time checks of simulator / estimator targets: import, kwargs, prior parameters."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kestrel_core._errors import ConfigError
from kestrel_core.config._instantiate import INPUT, TARGET, argument_problems, import_target
from kestrel_core.config._suggest import key_path
from kestrel_core.graph._spec import Spec

__all__ = ["spec_problems"]

_KWARG_PATH = re.compile(r"^(?P<name>[A-Za-z_]\w*)(\[\d+\]|\.\w+)*:")


def _nested(obj: Any, where: str, imports: Iterable[str]) -> list[str]:
    if isinstance(obj, Mapping):
        if INPUT in obj:
            return []
        if TARGET in obj:
            kwargs = {k: v for k, v in obj.items() if k != TARGET}
            target = obj[TARGET]
            if isinstance(target, str):
                try:
                    target = import_target(target, imports)
                except ConfigError as err:
                    return [f"{where}._target_: {err}"]
            return argument_problems(target, kwargs, where) + _nested(kwargs, where, imports)
        return [p for k, v in obj.items() for p in _nested(v, key_path(where, str(k)), imports)]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in _nested(v, key_path(where, i), imports)]
    return []


def _prefix(where: str, msg: str, kwargs: Mapping[str, Any]) -> str:
    """``where`` + message; ``"priors[0]: …"`` about a kwarg becomes ``"<where>.priors[0]: …"``."""
    match = _KWARG_PATH.match(msg)
    if match and match["name"] in kwargs:
        return f"{where}.{msg}"
    return f"{where}: {msg}"


def spec_problems(
    spec: Spec, where: str, build: Callable[[Any], bool] = lambda target: False
) -> list[str]:
    """Check that a spec's target imports and accepts its kwargs (nested specs too).

    Args:
        spec: the simulator or estimator spec.
        where: its key path, e.g. ``"graph.x.simulator"``.
        build: predicate on the imported target; when true (and nothing else is wrong) the
            spec is also built, so constructor checks run now — used for priors, whose
            constructor raises :class:`ConfigError` for invalid parameters.

    Returns:
        One message per problem, each starting with a key path such as
        ``graph.x.simulator.sigmaa``. Live instances are not checked.
    """
    if spec.is_live:
        return []
    try:
        target = spec.resolve()
    except ConfigError as err:
        return [f"{where}._target_: {err}"]
    if not callable(target):
        return [f"{where}._target_: {spec.target_name} is not callable"]
    problems = argument_problems(target, spec.kwargs, where)
    problems += _nested(spec.kwargs, where, spec.imports)
    if not problems and build(target):
        try:
            spec.build()
        except ConfigError as err:
            problems.append(_prefix(where, str(err), spec.kwargs))
        except (ValueError, TypeError) as err:
            problems.append(f"{where}: {type(err).__name__}: {err}")
    return problems
