"""``Spec``: what a node's simulator or estimator is built from."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kestrel_core._errors import ConfigError
from kestrel_core.config._instantiate import TARGET, import_target, instantiate, target_name

__all__ = ["Spec", "plain"]


def plain(obj: Any) -> Any:
    """Convert OmegaConf containers, mappings and tuples to plain ``dict``/``list`` (recursively);
    other values are returned as they are."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(obj, (DictConfig, ListConfig)):
        return OmegaConf.to_container(obj, resolve=True)
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def _is_factory(target: Any) -> bool:
    return inspect.isclass(target) or inspect.isfunction(target)


@dataclass(frozen=True)
class Spec:
    """A buildable simulator or estimator.

    Attributes:
        target: a dotted path ``"model.Signal"``, a class (or factory function), or a live
            instance (used as it is; then ``kwargs`` must be empty).
        kwargs: constructor keyword arguments, a plain ``dict``; nested ``_target_`` mappings
            are instantiated by :meth:`build`, ``_input_`` mappings are passed as they are.
        imports: directories put on :data:`sys.path` before ``target`` is imported
            (``paths.imports`` of the config).

    Example:
        >>> Spec("fractions.Fraction", {"numerator": 1, "denominator": 4}).build()
        Fraction(1, 4)
    """

    target: Any
    kwargs: dict[str, Any] = field(default_factory=dict)
    imports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kwargs, Mapping):
            raise ConfigError(f"Spec kwargs must be a mapping, got {type(self.kwargs).__name__}")
        object.__setattr__(self, "kwargs", plain(self.kwargs))
        object.__setattr__(self, "imports", tuple(str(d) for d in self.imports))
        if self.is_live and self.kwargs:
            raise ConfigError(
                f"{self.target_name} is a live instance; it takes no kwargs (got {sorted(self.kwargs)})"
            )

    @classmethod
    def coerce(cls, value: Any, where: str, imports: tuple[str, ...] = ()) -> Spec:
        """Make a Spec from a config value or Python object.

        Args:
            value: a Spec, a dotted-path string, a mapping with ``_target_`` plus kwargs, a
                pair ``(target, kwargs)`` of a class or path and a mapping (Python only:
                ``(model.Noise, {"sigma": 0.1})``), a class or function, or a live instance.
            where: key path for messages, e.g. ``"graph.x.simulator"``.
            imports: default ``imports`` for the new Spec.

        Raises:
            ConfigError: ``value`` is missing, a mapping without ``_target_``, or a number,
                bool or list.
        """
        if isinstance(value, Spec):
            return (
                value if value.imports or not imports else cls(value.target, value.kwargs, imports)
            )
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Mapping):
            target, kwargs = value
            if TARGET in kwargs:
                raise ConfigError(
                    f"{where}: ({target_name(target)}, kwargs): kwargs hold '_target_'"
                )
            return cls(target, dict(kwargs), imports)
        value = plain(value)
        if value is None:
            raise ConfigError(f"{where}: missing (expected a '_target_' path, mapping or class)")
        if isinstance(value, str):
            return cls(value, {}, imports)
        if isinstance(value, dict):
            if TARGET not in value:
                raise ConfigError(
                    f"{where}: a mapping needs a '_target_' key naming the class "
                    f"(found keys: {', '.join(sorted(value)) or 'none'})"
                )
            kwargs = {k: v for k, v in value.items() if k != TARGET}
            return cls(value[TARGET], kwargs, imports)
        if isinstance(value, (bool, int, float, complex, list, bytes)):
            raise ConfigError(
                f"{where}: expected a '_target_' path, a mapping with '_target_' or a class, "
                f"found {type(value).__name__} {value!r}"
            )
        return cls(value, {}, imports)

    @property
    def is_live(self) -> bool:
        """Whether ``target`` is a live instance rather than something to call."""
        return not isinstance(self.target, str) and not _is_factory(self.target)

    @property
    def target_name(self) -> str:
        """``"model.Signal"``, ``"pkg.mod.Class"`` or ``"<pkg.mod.Class instance>"``."""
        return target_name(self.target)

    def resolve(self) -> Any:
        """The class or function (imported if ``target`` is a path), or the live instance.

        Raises:
            ConfigError: the path cannot be imported.
        """
        if isinstance(self.target, str):
            return import_target(self.target, self.imports)
        return self.target

    def build(self) -> Any:
        """Build the object: ``target(**instantiate(kwargs))``, or the live instance itself.

        Returns:
            A new instance on each call (except for a live instance).

        Raises:
            ConfigError: the target cannot be imported or is not callable. Exceptions of the
                constructor propagate unchanged.
        """
        target = self.resolve()
        if self.is_live:
            return target
        if not callable(target):
            raise ConfigError(f"target {self.target_name} is not callable")
        return target(**instantiate(self.kwargs, self.imports))

    def to_config(self) -> Any:
        """A YAML-able form: ``{"_target_": path, **kwargs}`` (a class becomes its dotted path;
        a live instance becomes a ``"<… instance>"`` placeholder that does not load back)."""
        name = self.target_name
        return {TARGET: name, **self.kwargs} if self.kwargs else name
