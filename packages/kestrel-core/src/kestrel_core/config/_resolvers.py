"""Arithmetic in config values: the OmegaConf resolvers ``sqrt``, ``exp``, ``log`` and ``calc``.

::

    sigma: ${sqrt:0.1}                  # 0.31622776601683794
    scale: ${calc:'2 * pi / 60'}        # numbers, + - * / ** ( ), pi, e, sqrt, exp, log
    std:   ${calc:'sqrt(${variance})'}  # interpolations resolve first

Everything is evaluated as float64 by walking the parsed expression (Python's :mod:`ast`); only
numbers, the four operations, powers, unary signs, parentheses, the constants ``pi``/``e`` and
the functions ``sqrt``/``exp``/``log``/``log10``/``abs``/``min``/``max`` are accepted — never
names, attributes or calls of anything else, so a config cannot run code. A bad expression
raises :class:`~kestrel_core.ConfigError` quoting it; OmegaConf then reports the key path.

The resolvers are registered once per process by :func:`register_resolvers` (``load_config``
calls it), ``replace=True`` so re-registration is harmless.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any, cast

from kestrel_core._errors import ConfigError

__all__ = ["register_resolvers", "calc"]

_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[float], float]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CONSTANTS = {"pi": math.pi, "e": math.e}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "abs": abs,
    "min": min,
    "max": max,
}


def calc(expression: Any) -> float:
    """Evaluate an arithmetic expression (see the module docstring) as a float.

    Args:
        expression: a string such as ``"2 * pi / 60"``, or a number (returned as a float).

    Returns:
        The value, a Python float.

    Raises:
        ConfigError: anything but the allowed arithmetic, or a math domain error
            (``sqrt(-1)``, ``1/0``), quoting the expression.
    """
    if isinstance(expression, bool):
        raise ConfigError(
            f"calc: expected a number or an arithmetic expression, got {expression!r}"
        )
    if isinstance(expression, (int, float)):
        return float(expression)
    text = str(expression)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ConfigError(f"calc: {text!r} is not an arithmetic expression ({err.msg})") from err
    try:
        return float(_eval(tree.body, text))
    except ConfigError:
        raise
    except (ArithmeticError, ValueError, TypeError) as err:
        raise ConfigError(f"calc: {text!r} cannot be evaluated: {err}") from err


def _eval(node: ast.AST, text: str) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(cast(float, node.value))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left, text), _eval(node.right, text))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, text))
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and node.args
    ):
        return _FUNCTIONS[node.func.id](*(_eval(arg, text) for arg in node.args))
    shown = ast.get_source_segment(text, node) or type(node).__name__
    raise ConfigError(
        f"calc: {text!r}: {shown!r} is not allowed (numbers, + - * / **, parentheses, "
        f"{', '.join(_CONSTANTS)}, {', '.join(_FUNCTIONS)})"
    )


def _unary(name: str) -> Callable[[Any], float]:
    def resolver(value: Any) -> float:
        return calc(f"{name}({calc(value)!r})")

    return resolver


def register_resolvers() -> None:
    """Register ``calc``, ``sqrt``, ``exp`` and ``log`` with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    # OmegaConf 2.4 renamed register_new_resolver (kept, deprecated) to register_resolver
    register = getattr(OmegaConf, "register_resolver", None) or OmegaConf.register_new_resolver
    register("calc", calc, replace=True)
    for name in ("sqrt", "exp", "log"):
        register(name, _unary(name), replace=True)
