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
    {
        "kestrel",
        "kestrel_core",
        "kestrel_ray",
        "kestrel_torch",
        "ray",
        "asyncio",
        "concurrent",
        "threading",
    }
)
_PATHS = sysconfig.get_paths()
_STDLIB = tuple(
    {os.path.realpath(p) + os.sep for k in ("stdlib", "platstdlib") if (p := _PATHS.get(k))}
)
_PACKAGES = tuple(
    {os.path.realpath(p) + os.sep for k in ("purelib", "platlib") if (p := _PATHS.get(k))}
)


def _where(tb: TracebackType) -> str:
    """``"internal"`` (Kestrel, Ray, the standard library), ``"package"`` (installed in
    site-packages) or ``"user"``."""
    frame = tb.tb_frame
    module = str(frame.f_globals.get("__name__", ""))
    name = frame.f_code.co_filename
    path = os.path.realpath(name)
    if module.split(".")[0] in _INTERNAL or name.startswith("<frozen"):
        return "internal"
    if path.startswith(_PACKAGES):  # site-packages may sit inside the stdlib folder
        return "package"
    return "internal" if path.startswith(_STDLIB) else "user"


def user_traceback(err: BaseException) -> str:
    """The traceback of ``err`` restricted to user code, formatted like Python's.

    Args:
        err: an exception that was raised (it has a ``__traceback__``).

    Returns:
        ``"Traceback (user code only):\\n  File \\"model.py\\", line 12, in simulate_batch\\n
        …\\nValueError: theta0 > 2\\n"``, with the exception's notes. When no frame is the
        user's, the installed packages' frames are shown (user code installed with pip), else
        the innermost frame.
    """
    tbs: list[TracebackType] = []
    tb = err.__traceback__
    while tb is not None:
        tbs.append(tb)
        tb = tb.tb_next
    kinds = [_where(t) for t in tbs]
    mine = (
        [t for t, k in zip(tbs, kinds) if k == "user"]
        or [t for t, k in zip(tbs, kinds) if k == "package"]
        or tbs[-1:]
    )
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
