"""The exceptions of kestrel_ray, and how Ray's errors become them.

kestrel_ray raises kestrel-core's exceptions (:class:`~kestrel_core.KestrelError` and its
subclasses) for everything a user can fix; its own are :class:`RunError`, a launch that failed
because a node's actor raised, and :class:`ClusterError`, Ray that could not be started or
joined. Errors that come back from an actor through
Ray are translated once, by :func:`unwrap_error`, so that every driver-side call names the node
and the call that failed.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

from kestrel_core import KestrelError, SimulatorError
from kestrel_core.internal import attached_traceback

__all__ = ["RunError", "ClusterError", "unwrap_error", "describe_failure"]


class RunError(KestrelError):
    """A launch failed: a node's actor raised.

    The message names the node, the error and the actor's traceback.

    Attributes:
        node: the node whose actor failed (``None`` when unknown).
        result: the launch's :class:`~kestrel.RunResult` (status ``"failed"``), when known.
    """

    def __init__(self, message: str, *, node: str | None = None, result: Any = None):
        super().__init__(message)
        self.node = node
        self.result = result


class ClusterError(KestrelError):
    """Ray could not be started or joined: the address cannot work, or the connection failed.

    The message names the address, where it came from (``--address`` or ``RAY_ADDRESS``) and
    the remedy.
    """


_EXC_LINE = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit|Interrupt)): (.*)$")


def unwrap_error(err: BaseException, node: str, what: str) -> BaseException:
    """Turn a Ray error from a node's actor into the error to raise on the driver.

    A Kestrel error raised in the actor (it names the node) comes back as it is; a user
    exception is returned unchanged with a note naming the node; an actor that died is
    described with the last exception line Ray reported (e.g. the ``TypeError`` of a
    simulator constructor).

    Args:
        err: the exception ``ray.get`` raised.
        node: node name, for the message.
        what: the call that failed, e.g. ``"start"`` or ``"sample_proposal(64)"``.

    Returns:
        The exception to raise (``raise unwrap_error(...) from err``).
    """
    import ray

    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        while (
            isinstance(cause, ray.exceptions.RayTaskError)
            and getattr(cause, "cause", None) is not None
        ):
            cause = cause.cause
        if isinstance(cause, KestrelError):
            return cause
        if isinstance(cause, BaseException):
            if hasattr(cause, "add_note"):
                cause.add_note(f"(node {node!r}, {what})")
            return cause
    if isinstance(err, ray.exceptions.RayActorError):
        text = str(err)
        lines = [m for m in (_EXC_LINE.match(ln.strip()) for ln in text.splitlines()) if m]
        reason = f"{lines[-1].group(1)}: {lines[-1].group(2)}" if lines else text.splitlines()[0]
        return SimulatorError(f"node {node!r}: actor died during {what}: {reason}")
    return SimulatorError(f"node {node!r}: {what} failed: {type(err).__name__}: {err}")


def describe_failure(
    err: BaseException,
    *,
    remote: BaseException | None = None,
    node: str | None = None,
    short: bool = False,
) -> str:
    """A failed node call as text: the error, its notes, the traceback recorded in the actor.

    Args:
        err: the exception to describe (typically what :func:`unwrap_error` returned).
        remote: the Ray error it came from (default: ``err.__cause__``); its ``traceback_str``
            is the actor's traceback.
        node: the node, named in the traceback's heading when given.
        short: where the actor attached the user's frames of the traceback (a simulator's
            exception, see :func:`kestrel_core.execute._blame.attach_user_traceback`), show those
            instead of the whole traceback (which belongs in the driver log).

    Returns:
        ``"TypeError: …\n(node 'x', train)\n\nTraceback in the actor of node 'x':\n…"``, or
        with ``short``: ``"Traceback (user code only):\n  File "model.py", line 12, …\n
        ValueError: …\n(raised by the simulator of node 'x')\n(node 'x', sample(64))"``.
    """
    notes = [str(note) for note in getattr(err, "__notes__", [])]
    mine = attached_traceback(err) if short else None
    if mine:  # it ends with the exception and the notes it had in the actor
        return "\n".join([mine.rstrip(), *(note for note in notes if note not in mine)])
    lines = [f"{type(err).__name__}: {err}", *notes]
    source = remote if remote is not None else err.__cause__
    text = getattr(source, "traceback_str", None)
    if text is None and remote is not None:
        text = "".join(traceback.format_exception(remote))
    if text:
        where = "the actor" if node is None else f"the actor of node {node!r}"
        lines += ["", f"Traceback in {where}:", text.rstrip()]
    return "\n".join(lines)
