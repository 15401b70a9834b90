"""The boundary between Kestrel and user code: counts, simulator calls and output checks.

Everything user code returns passes through here once: lists, numpy scalars and CPU tensors
(anything with ``__array__``) are converted with ``np.asarray``; ``None``, dicts without
``value``, non-numeric, complex, masked (with masked entries) and ragged outputs raise errors
naming the node, the method and what was found — the same arrays
:func:`~kestrel_core.graph._inputs.as_input` refuses as observations. Everything handed *to* user code is a read-only view, so a simulator cannot corrupt
stored data. Shape symbols: N samples in the call, D a node's per-sample shape.
"""

from __future__ import annotations

import inspect
import numbers
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kestrel_core._errors import CountError, KestrelError, OutputTypeError, ShapeError
from kestrel_core.execute._readonly import input_write_error
from kestrel_core.graph._inputs import COMPLEX_HINT, INPUT_KINDS, masked_problem
from kestrel_core.graph._trace import flat_key, format_shapes

__all__ = [
    "check_count",
    "call_simulator",
    "as_record",
    "finite_rows",
    "rng_keyword",
    "call_estimator",
]

_NUMERIC_KINDS = INPUT_KINDS  # real: b i u f


def check_count(n: Any, what: str = "n") -> int:
    """Validate a sample count.

    Args:
        n: a Python or numpy integer ≥ 0 (``bool`` and floats such as ``5.0`` are refused).
        what: the argument's name for the message.

    Returns:
        ``n`` as a Python ``int``.

    Raises:
        CountError: ``n`` is not an integer, or negative.

    Example:
        >>> check_count(np.int64(5))
        5
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral):
        raise CountError(f"{what} must be a non-negative integer, got {n!r} ({type(n).__name__})")
    if n < 0:
        raise CountError(f"{what} must be a non-negative integer, got {int(n)}")
    return int(n)


_ACCEPTS_RNG: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _accepts_rng(method: Any) -> bool:
    """Whether ``method`` has a parameter ``rng`` that can be passed by keyword (cached)."""
    func = getattr(method, "__func__", method)
    try:
        return _ACCEPTS_RNG[func]
    except (KeyError, TypeError):
        pass
    try:
        param = inspect.signature(method).parameters.get("rng")
    except (TypeError, ValueError):
        param = None
    ok = param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
    try:
        _ACCEPTS_RNG[func] = ok
    except TypeError:  # not weak-referenceable
        pass
    return ok


def rng_keyword(method: Any, rng: np.random.Generator | None) -> dict[str, Any]:
    """``{"rng": rng}`` when ``rng`` is given and ``method`` takes a keyword ``rng``, else ``{}``.

    How a simulator or estimator method gets the call's generator: only if it asks for one.
    """
    return {"rng": rng} if rng is not None and _accepts_rng(method) else {}


def accepts_keyword(method: Any, name: str) -> bool:
    """Whether ``method`` has a parameter ``name`` that can be passed by keyword."""
    try:
        param = inspect.signature(method).parameters.get(name)
    except (TypeError, ValueError):
        return False
    return param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)


def call_estimator(
    estimator: Any, method: str, n: int, conditions: Any, seed: Any, round: int | None = None
) -> Any:
    """``estimator.<method>(n, conditions)``, passing ``rng=`` a generator of ``seed`` (a
    ``SeedSequence`` or int, from the sampling call's seed) when the method accepts it: an
    estimator's draws follow the sampling call's seed, not the estimator's own. ``round``
    (a resimulation round, :class:`kestrel_core.Rounds`) is passed as ``round=`` to a
    ``sample_proposal`` that accepts it.
    """
    draw = getattr(estimator, method)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    rng = np.random.Generator(np.random.PCG64(seq))
    extra: dict[str, Any] = rng_keyword(draw, rng)
    if round is not None and method == "sample_proposal" and accepts_keyword(draw, "round"):
        extra["round"] = int(round)
    return draw(n, conditions, **extra)


def _read_only(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def _to_array(node: str, method: str, out: Any, *, field: str = "value") -> np.ndarray:
    """Convert one user output to a numeric ndarray, once."""
    if isinstance(out, Mapping):
        if field not in out:
            raise OutputTypeError(
                f"node {node!r}: {method} returned a dict without {field!r} "
                f"(keys: {sorted(map(str, out))}); expected an array or {{{field!r}: array}}"
            )
        out = out[field]
    masked = masked_problem(out)
    if masked is not None:
        raise OutputTypeError(f"node {node!r}: {method} returned an array that {masked}")
    if isinstance(out, np.ma.MaskedArray):
        out = out.data  # nothing masked
    if out is None or isinstance(out, (str, bytes)):
        raise OutputTypeError(
            f"node {node!r}: {method} returned {type(out).__name__}; expected an array"
        )
    if not isinstance(out, np.ndarray):
        if not isinstance(out, (list, tuple, numbers.Number, np.generic)) and not hasattr(
            out, "__array__"
        ):
            raise OutputTypeError(
                f"node {node!r}: {method} returned {type(out).__module__}.{type(out).__qualname__}; "
                "expected a numpy array, list, number or CPU tensor"
            )
        try:
            out = np.asarray(out)
        except (TypeError, ValueError, RuntimeError) as err:
            raise OutputTypeError(
                f"node {node!r}: {method} returned a {type(out).__name__} that numpy cannot convert "
                f"({err}); return a numpy array, a rectangular list, or a detached CPU tensor"
            ) from err
    if out.dtype.kind == "c":
        raise OutputTypeError(
            f"node {node!r}: {method} returned complex dtype {out.dtype}; {COMPLEX_HINT}"
        )
    if out.dtype.kind not in _NUMERIC_KINDS:
        raise OutputTypeError(
            f"node {node!r}: {method} returned an array of dtype {out.dtype}; expected a numeric dtype"
        )
    return out


def _finish(out: np.ndarray, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """C-contiguous, native-endian, writable, sharing no memory with ``inputs``."""
    if not out.dtype.isnative:
        out = out.astype(out.dtype.newbyteorder("="))
    if (
        not out.flags.writeable
        or not out.flags.c_contiguous
        or any(np.may_share_memory(out, p) for p in inputs)
    ):
        out = np.array(out, order="C", copy=True)
    return out


def call_simulator(
    node: str,
    simulator: Any,
    n: int,
    parents: Sequence[Any] | Mapping[str, Any] = (),
    *,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Run a node's simulator for ``n`` samples and validate what it returns.

    Uses ``simulator.simulate_batch(n, *parents)`` when it exists, else calls
    ``simulator.simulate(*rows)`` once per sample and stacks. ``rng`` is passed as keyword
    only if the method has a parameter ``rng`` (checked once per function, cached).

    Args:
        node: node name, for messages.
        simulator: object with ``simulate_batch`` or ``simulate``.
        n: number of samples, an integer ≥ 1 (callers skip empty calls).
        parents: parent values in order (or a mapping name → value, which names them in
            errors), arrays of shape ``(N, *D_p)`` or ``(1, *D_p)`` (broadcast). User code
            receives read-only views, broadcast ones via ``np.broadcast_to``: they share memory
            with stored samples and observations, so a simulator copies an input
            (``x = x.copy()``) before changing it in place.
        rng: generator for this call.

    Returns:
        ndarray ``(n, *D)``: numeric, C-contiguous, native-endian, writable and owning memory
        no input shares. A per-sample output of shape ``(1, 10)`` stays ``(1, 10)`` per sample.

    Raises:
        CountError: ``n`` is not an integer ≥ 1.
        ShapeError: a parent's leading dimension is neither ``n`` nor 1; ``simulate_batch``
            returned a leading dimension other than ``n``; per-sample shapes differ.
        OutputTypeError: the output is ``None``, a dict without ``value``, not convertible,
            not numeric, complex or a masked array with masked entries; the simulator has
            neither method.
        InputWriteError: the simulator wrote into one of its (read-only) inputs; the message
            names the node, the input and the remedy (copy it). Also a ``ValueError``.
        Exception: the simulator's own exceptions pass through with a note naming the node.
    """
    n = check_count(n)
    if n == 0:
        raise CountError(f"node {node!r}: call_simulator needs n ≥ 1 (callers skip empty calls)")
    names = list(parents) if isinstance(parents, Mapping) else None
    values = list(parents.values()) if isinstance(parents, Mapping) else list(parents)
    inputs, labels = [], []
    for i, p in enumerate(values):
        arr = np.asarray(p)
        label = f"parent {names[i]!r}" if names else f"parent {i}"
        labels.append(label)
        if arr.ndim == 0 or arr.shape[0] not in (1, n):
            raise ShapeError(
                f"node {node!r}: {label} has shape {arr.shape}; expected leading dimension "
                f"1 (broadcast) or {n}"
            )
        view = np.broadcast_to(arr, (n,) + arr.shape[1:]) if arr.shape[0] != n else _read_only(arr)
        inputs.append(view)
    batch: Any = getattr(simulator, "simulate_batch", None)
    single: Any = getattr(simulator, "simulate", None)
    method: Callable[..., Any] | None = (
        batch if callable(batch) else single if callable(single) else None
    )
    if method is None:
        raise OutputTypeError(
            f"node {node!r}: simulator {type(simulator).__qualname__} has neither "
            "simulate_batch(n, *parents) nor simulate(*parents)"
        )
    kwargs = rng_keyword(method, rng)
    try:
        if method is batch:
            label = f"simulate_batch({n}, …)"
            out = _to_array(node, label, method(n, *inputs, **kwargs))
            if out.ndim == 0 or out.shape[0] != n:
                raise ShapeError(
                    f"node {node!r}: {label} returned shape {out.shape}, expected leading dimension {n}"
                )
        else:
            label = "simulate(…)"
            rows: list[np.ndarray] = []
            for k in range(n):
                row = _to_array(node, label, method(*(p[k] for p in inputs), **kwargs))
                if rows and row.shape != rows[0].shape:
                    raise ShapeError(
                        f"node {node!r}, key {flat_key(node)!r}: sample {k} has shape {row.shape}, "
                        f"expected {rows[0].shape}"
                    )
                rows.append(row)
            out = np.stack(rows)
    except KestrelError:
        raise
    except Exception as err:
        written = input_write_error(node, label, err, inputs, labels)
        if written is not None:
            raise written from err
        if hasattr(err, "add_note"):
            err.add_note(f"(raised by the simulator of node {node!r})")
        raise
    return _finish(out, inputs)


def as_record(
    node: str,
    method: str,
    output: Any,
    n: int,
    *,
    fields: Sequence[str] = ("value", "log_prob"),
) -> dict[str, np.ndarray]:
    """Validate and convert an estimator's (or simulator's) output to a record.

    Args:
        node: node name, for messages.
        method: the method that produced ``output`` (e.g. ``"sample_posterior"``).
        output: a mapping with the ``fields`` (arrays, lists or CPU tensors), or a bare array
            taken as ``value`` when ``fields`` is ``("value",)``.
        n: expected number of samples.
        fields: required fields; other keys of ``output`` are ignored.

    Returns:
        ``{"value": ndarray (n, *D), "log_prob": float64 ndarray (n,)}`` (the fields asked for),
        C-contiguous and native-endian.

    Raises:
        OutputTypeError: ``None``, a missing field, non-numeric, complex, masked or
            unconvertible values.
        ShapeError: a leading dimension is not ``n``, or ``log_prob`` is not ``(n,)``.
    """
    n = check_count(n)
    if not isinstance(output, Mapping):
        if tuple(fields) != ("value",):
            raise OutputTypeError(
                f"node {node!r}: {method} returned {type(output).__name__}; expected a dict with "
                f"keys {', '.join(map(repr, fields))}"
            )
        output = {"value": output}
    record = {}
    for field in fields:
        arr = _to_array(node, method, output, field=field)
        if field == "log_prob":
            if arr.shape != (n,):
                raise ShapeError(
                    f"node {node!r}, key {flat_key(node, field)!r}: {method} returned shape {arr.shape}, "
                    f"expected ({n},)"
                )
            arr = arr.astype(np.float64, copy=False)
        elif arr.ndim == 0 or arr.shape[0] != n:
            raise ShapeError(
                f"node {node!r}, key {flat_key(node, field)!r}: {method} returned shape {arr.shape}, "
                f"expected leading dimension {n}"
            )
        record[field] = _finish(arr, ())
    return record


def finite_rows(trace: Mapping[str, Any]) -> np.ndarray:
    """Rows in which every key's values are finite (integer/bool keys always are).

    Args:
        trace: flat key → array ``(N, ...)``.

    Returns:
        bool array ``(N,)``; shape ``(0,)`` for an empty trace.

    Raises:
        ShapeError: the keys' leading dimensions differ (message includes the shape table).
    """
    ok: np.ndarray | None = None
    for key, value in trace.items():
        arr = np.asarray(value)
        if arr.ndim == 0 or (ok is not None and arr.shape[0] != ok.shape[0]):
            raise ShapeError(
                f"key {key!r} does not line up with the trace\n" + format_shapes(trace)
            )
        rows = np.ones(arr.shape[0], dtype=bool)
        if arr.dtype.kind in "fc":
            rows = np.isfinite(arr).all(axis=tuple(range(1, arr.ndim)))  # (0, D) too
        ok = rows if ok is None else ok & rows
    return np.ones(0, dtype=bool) if ok is None else ok
