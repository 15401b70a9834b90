"""Inputs handed to user code are read-only; a write into one is reported naming the input.

A simulator's parents arrive as read-only views of stored samples (or of a one-row
observation, broadcast): the same memory may feed other nodes, other chunks and the store, so
writing into it in place would corrupt them. numpy refuses the write with a bare
``ValueError: … is read-only``; :func:`input_write_error` turns that into an
:class:`~kestrel_core.InputWriteError` naming the node, the input and the remedy (copy it).

Which input was written is read from the frame that raised: its local variables that share
memory with an input, and of those the one the failing source line writes (``out=name``, else
the first named on the line). With a single input there is nothing to guess.
"""

from __future__ import annotations

import linecache
import os
import re
import types
from collections.abc import Sequence

import numpy as np

from kestrel_core._errors import InputWriteError

__all__ = ["input_write_error", "READ_ONLY_NOTE"]

#: what every simulator is told about its inputs (docstrings and messages)
READ_ONLY_NOTE = "inputs are read-only views shared with the stored samples and the observation"

_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))


def _is_read_only_error(err: BaseException) -> bool:
    return isinstance(err, ValueError) and "read-only" in str(err)


def _user_frame(err: BaseException) -> types.FrameType | None:
    """The innermost frame of the traceback outside numpy (where the write was written)."""
    frame = None
    tb = err.__traceback__
    while tb is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not filename.startswith(_NUMPY_DIR):
            frame = tb.tb_frame
        tb = tb.tb_next
    return frame


def _written(
    err: BaseException, inputs: Sequence[np.ndarray], labels: Sequence[str]
) -> tuple[str, str] | bool:
    """``(variable name, input label)`` of the input the failing line writes; ``False`` when the
    failing frame holds no view of an input (the read-only array is not an input); ``True``
    when an input was written but which one cannot be told."""
    frame = _user_frame(err)
    if frame is None:
        return True
    candidates: dict[str, str] = {}
    for var, value in frame.f_locals.items():
        if isinstance(value, np.ndarray):
            for arr, label in zip(inputs, labels):
                if np.may_share_memory(value, arr):
                    candidates[var] = label
                    break
    if not candidates:
        return False
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    out = re.search(r"\bout\s*=\s*\(?\s*([A-Za-z_]\w*)", line)
    if out and out.group(1) in candidates:
        return out.group(1), candidates[out.group(1)]
    names = re.findall(r"[A-Za-z_]\w*", line)
    for name in names:
        if name in candidates:
            return name, candidates[name]
    if any(isinstance(frame.f_locals.get(name), np.ndarray) for name in names):
        return False  # the line writes an array of the user's own
    if len(set(candidates.values())) == 1:
        var, label = next(iter(candidates.items()))
        return var, label
    return True


def input_write_error(
    node: str, method: str, err: BaseException, inputs: Sequence[np.ndarray], labels: Sequence[str]
) -> InputWriteError | None:
    """The error to raise for ``err`` when it is a write into one of ``inputs``, else ``None``.

    Args:
        node: node name. method: the user method that raised (e.g. ``"simulate_batch(16, …)"``).
        err: the exception user code raised.
        inputs: the read-only arrays handed to user code. labels: their names in messages
            (e.g. ``"parent 'a'"``), one per input.

    Returns:
        An :class:`~kestrel_core.InputWriteError` naming the node, the input (when it can be
        told; else every input) and the remedy, or ``None`` when ``err`` is not numpy's
        read-only refusal or there were no inputs.
    """
    if not inputs or not _is_read_only_error(err):
        return None
    found = _written(err, inputs, labels)
    if found is False:
        return None
    if found is True and len(inputs) == 1:
        found = ("x", labels[0])
    if not isinstance(found, bool):
        var, label = found
        what = f"changed its input, {label}, in place"
        remedy = f"copy it before changing it in place, e.g. `{var} = {var}.copy()`"
    else:
        what = f"changed one of its inputs ({', '.join(labels)}) in place"
        remedy = "copy an input before changing it in place, e.g. `x = x.copy()`"
    return InputWriteError(
        f"node {node!r}: {method} {what} ({err}); {READ_ONLY_NOTE}, so a simulator must "
        f"not change them: {remedy}"
    )
