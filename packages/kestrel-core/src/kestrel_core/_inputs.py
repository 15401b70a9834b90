"""The one normalisation of arrays that enter a run from outside: observations, given samples.

Every array a user hands over at run time — an observation read from a file or passed to
``sample_posterior``, samples read from disk, a condition given to an estimator directly — passes
:func:`as_input` before anything else reads it, so each later step sees the same kind of array:

* **dtype**: numeric or boolean (numpy kinds ``b i u f c``), kept as it is (an estimator casts
  its conditions to the dtype it was trained on); anything else (object, string, datetime
  arrays) is refused;
* **byte order**: native (a big-endian ``>f8`` array is converted, values unchanged);
* **layout**: C-contiguous and packed (a reversed or strided view is copied);
* **ownership**: with ``copy=True`` always a fresh, read-only copy the caller cannot change
  afterwards (what a run keeps); with ``copy=False`` the input itself when it already has that
  form (for a caller that copies anyway, e.g. into Ray's object store).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import ConfigError, KestrelError

__all__ = ["as_input", "INPUT_KINDS"]

#: numpy dtype kinds accepted from outside: bool, signed and unsigned int, float, complex
INPUT_KINDS = "biufc"


def as_input(
    value: Any,
    what: str = "input",
    *,
    copy: bool = True,
    error: type[KestrelError] = ConfigError,
) -> np.ndarray:
    """Normalise an array entering a run: numeric dtype, native byte order, C-contiguous.

    Args:
        value: array-like (a numpy array of any byte order and strides, a list, a number, or
            anything with ``__array__``).
        what: what the array is, for messages (e.g. ``"observation 'x'"``).
        copy: return a fresh read-only copy (else the input itself when it needs no change).
        error: the exception class raised for a non-numeric array.

    Returns:
        ndarray with the input's shape and values: dtype kind in ``biufc``, native byte
        order, C-contiguous; a read-only copy when ``copy`` is true.

    Raises:
        KestrelError: (of class ``error``) the array is not numeric or boolean, or numpy cannot
            make an array of it.

    Example:
        >>> big = np.arange(3.0).astype(">f8")[::-1]
        >>> out = as_input(big)
        >>> out.dtype.isnative, out.flags.c_contiguous, out.tolist()
        (True, True, [2.0, 1.0, 0.0])
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise error(f"{what}: cannot be made an array ({err})") from err
    if arr.dtype.kind not in INPUT_KINDS:
        raise error(f"{what}: expected a numeric array, found dtype {arr.dtype}")
    dtype = arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("=")
    if copy:
        out = np.array(arr, dtype=dtype, order="C", copy=True)
        out.flags.writeable = False
        return out
    if dtype != arr.dtype or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=dtype)
    return arr
