"""Blame: the short traceback of an exception raised in user code.

A simulator that raises deep inside a Kestrel call (or inside a Ray actor) leaves a long
traceback of which only a few lines are the user's. :func:`user_traceback` keeps those: the
frames that are neither Kestrel's, Ray's, the standard library's nor an installed package's,
so a message can point at the file and line to fix. The full traceback is not lost: a run's
driver log keeps it, and the short text is attached to the exception (:data:`USER_TRACEBACK`)
where it was raised, because a traceback does not survive the trip from a Ray actor.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from types import TracebackType

__all__ = ["user_traceback", "attach_user_traceback", "attached_traceback", "USER_TRACEBACK"]

#: attribute under which :func:`attach_user_traceback` stores the short text on an exception
USER_TRACEBACK = "kestrel_user_traceback"
#: top-level modules whose frames are never the user's
_INTERNAL = frozenset(
    {"kestrel_core", "kestrel_ray", "kestrel_torch", "ray", "asyncio", "concurrent", "threading"}
)
_LIBRARY_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if p
)


def _is_user_frame(tb: TracebackType) -> bool:
    frame = tb.tb_frame
    module = str(frame.f_globals.get("__name__", ""))
    if module.split(".")[0] in _INTERNAL:
        return False
    path = os.path.realpath(frame.f_code.co_filename)
    return not path.startswith(_LIBRARY_DIRS) and not frame.f_code.co_filename.startswith("<frozen")


def user_traceback(err: BaseException) -> str:
    """The traceback of ``err`` restricted to user code, formatted like Python's.

    Args:
        err: an exception that was raised (it has a ``__traceback__``).

    Returns:
        ``"Traceback (user code only):\\n  File \\"model.py\\", line 12, in simulate_batch\\n
        …\\nValueError: theta0 > 2\\n"``, with the exception's notes. When no frame is the
        user's (the error came from a library), the innermost frame is shown instead.
    """
    tbs: list[TracebackType] = []
    tb = err.__traceback__
    while tb is not None:
        tbs.append(tb)
        tb = tb.tb_next
    mine = [t for t in tbs if _is_user_frame(t)] or tbs[-1:]
    frames = traceback.StackSummary.extract(
        (t.tb_frame, t.tb_lineno) for t in mine
    )  # one summary per kept frame, source lines included
    lines = ["Traceback (user code only):\n", *frames.format()] if mine else []
    lines += traceback.format_exception_only(type(err), err)
    return "".join(lines)


def attach_user_traceback(err: BaseException) -> BaseException:
    """Store :func:`user_traceback` on ``err`` (survives pickling, e.g. out of a Ray actor).

    Returns:
        ``err``. An exception that refuses new attributes is returned as it is.
    """
    if getattr(err, USER_TRACEBACK, None) is None:
        try:
            setattr(err, USER_TRACEBACK, user_traceback(err))
        except (AttributeError, TypeError):  # e.g. __slots__
            pass
    return err


def attached_traceback(err: BaseException) -> str | None:
    """The short traceback stored by :func:`attach_user_traceback`, or ``None``."""
    text = getattr(err, USER_TRACEBACK, None)
    return text if isinstance(text, str) else None
