"""The one normalisation of arrays that enter a run from outside: observations, given samples.

Every array a user hands over at run time — an observation read from a file or passed to
``sample_posterior``, samples read from disk, a condition given to an estimator directly — passes
:func:`as_input` before anything else reads it, so each later step sees the same kind of array:

* **dtype**: real numeric or boolean (numpy kinds ``b i u f``), kept as it is (an estimator casts
  its conditions to the dtype it was trained on); a complex array is refused (its imaginary
  part would be dropped later, silently: split real and imaginary parts into features), and
  so is anything else (object, string, datetime arrays);
* **masks**: a numpy masked array with masked entries is refused (numpy would hand on the
  values under the mask as if they were data); one with nothing masked is its data;
* **byte order**: native (a big-endian ``>f8`` array is converted, values unchanged);
* **layout**: C-contiguous and packed (a reversed or strided view is copied);
* **ownership**: with ``copy=True`` always a fresh, read-only copy the caller cannot change
  afterwards (what a run keeps); with ``copy=False`` the input itself when it already has that
  form (for a caller that copies anyway, e.g. into Ray's object store).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError, KestrelError

__all__ = ["as_input", "INPUT_KINDS", "input_problem", "masked_problem", "COMPLEX_HINT"]

#: numpy dtype kinds accepted from outside: bool, signed and unsigned int, float (not complex)
INPUT_KINDS = "biuf"
#: what a message about a complex array tells the user to do
COMPLEX_HINT = "Kestrel needs real numbers (split real and imaginary parts into features)"


def masked_problem(value: Any) -> str | None:
    """Why a masked array cannot enter a run (``None``: not masked, or nothing masked)."""
    if not isinstance(value, np.ma.MaskedArray):
        return None
    count = int(np.ma.count_masked(value))
    if not count:
        return None
    entries = "entry" if count == 1 else "entries"
    return (
        f"is a masked array with {count} masked {entries} of {value.size}; Kestrel does not "
        "read masks (numpy would pass on the values under the mask): drop the masked entries "
        "or fill them (arr.filled(value)) before handing the array over"
    )


def input_problem(value: Any) -> str | None:
    """Why an array-like ``value`` cannot enter a run as numbers, or ``None``.

    The text follows the thing described (``f"{what} {problem}"``): a masked array with masked
    entries, a complex dtype, a non-numeric dtype. Used for observations, given samples and
    conditions (:func:`as_input`) and for what simulators and estimators return
    (:mod:`kestrel_core.execute._boundary`), so both sides refuse the same arrays.

    Example:
        >>> input_problem(np.array([1 + 1j, 2]))
        'has complex dtype complex128; Kestrel needs real numbers (split real and imaginary parts into features)'
    """
    masked = masked_problem(value)
    if masked is not None:
        return masked
    dtype = getattr(value, "dtype", None)
    if not isinstance(dtype, np.dtype):
        return None
    if dtype.kind == "c":
        return f"has complex dtype {dtype}; {COMPLEX_HINT}"
    if dtype.kind not in INPUT_KINDS:
        return f"has dtype {dtype}; expected a numeric array"
    return None


def as_input(
    value: Any,
    what: str = "input",
    *,
    copy: bool = True,
    error: type[KestrelError] = ConfigError,
    node: str | None = None,
) -> np.ndarray:
    """Normalise an array entering a run: real numeric dtype, native byte order, C-contiguous.

    Args:
        value: array-like (a numpy array of any byte order and strides, a list, a number, or
            anything with ``__array__``).
        what: what the array is, for messages (e.g. ``"observation 'x'"``).
        copy: return a fresh read-only copy (else the input itself when it needs no change).
        error: the exception class raised for a non-numeric array.
        node: the node the array belongs to; messages then start with ``node 'x': ``.

    Returns:
        ndarray with the input's shape and values: dtype kind in ``biuf``, native byte
        order, C-contiguous; a read-only copy when ``copy`` is true.

    Raises:
        KestrelError: (of class ``error``) the array is complex, a masked array with masked
            entries, not numeric or boolean, or numpy cannot make an array of it; the message
            names ``what`` (and ``node``).

    Example:
        >>> big = np.arange(3.0).astype(">f8")[::-1]
        >>> out = as_input(big)
        >>> out.dtype.isnative, out.flags.c_contiguous, out.tolist()
        (True, True, [2.0, 1.0, 0.0])
    """
    prefix = "" if node is None else f"node {node!r}: "
    problem = masked_problem(value)
    if problem is not None:
        raise error(f"{prefix}{what} {problem}")
    if isinstance(value, np.ma.MaskedArray):
        value = value.data  # nothing masked: its data
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise error(f"{prefix}{what}: cannot be made an array ({err})") from err
    if arr.dtype.kind == "c":
        raise error(f"{prefix}{what} has complex dtype {arr.dtype}; {COMPLEX_HINT}")
    if arr.dtype.kind not in INPUT_KINDS:
        raise error(f"{prefix}{what}: expected a numeric array, found dtype {arr.dtype}")
    dtype = arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("=")
    if copy:
        out = np.array(arr, dtype=dtype, order="C", copy=True)
        out.flags.writeable = False
        return out
    if dtype != arr.dtype or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=dtype)
    return arr
