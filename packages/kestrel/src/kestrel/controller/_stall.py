"""Calls that run for long are said: a hung simulator without a node ``timeout`` is visible.

A node with ``timeout`` set has its hung calls killed and retried
(:mod:`kestrel_ray.node._timeout`); without one, a simulator that hangs holds the launch where
it waits for that call. :class:`StallWatch` logs a warning when the call the launch waits for
has run :data:`STALL_NOTE` seconds, then again each time that time doubles, naming the nodes
whose calls are not done, so the progress output shows the stall and what to do about it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from kestrel.report._env import env_seconds

__all__ = ["StallWatch", "STALL_NOTE"]


#: seconds after which a call the launch waits for is reported (``KESTREL_STALL_NOTE``)
STALL_NOTE = env_seconds("KESTREL_STALL_NOTE", 300.0, least=0.1)


class StallWatch:
    """Reports the call a launch waits for once it has run long.

    Args:
        log: the driver's logger.
        what: what waits, e.g. ``"initial simulation"`` or ``"round 3"``.
        after: seconds before the first report (:data:`STALL_NOTE`).
    """

    def __init__(self, log: logging.Logger, what: str, after: float | None = None):
        self.log, self.what = log, what
        self.after = STALL_NOTE if after is None else float(after)
        self._since: float | None = None
        self._next = self.after

    def clear(self) -> None:
        """The call waited for is done: the next one is timed afresh."""
        self._since, self._next = None, self.after

    def check(self, waiting: Callable[[], Sequence[str]], where: str = "") -> None:
        """The launch still waits; once it has waited long, report the nodes ``waiting()``
        names (asked only then: it polls the calls)."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
            return
        ran = now - self._since
        if ran < self._next:
            return
        self._next *= 2
        nodes = waiting()
        if not nodes:
            return
        self.log.warning(
            "%s%s: the call of node%s %s has run for %s and is not done; with no node "
            "`timeout`, a simulator that hangs holds the launch here (set `timeout` on the "
            "node to retry hung calls; Ctrl-C stops the launch and saves what it has)",
            self.what,
            f" ({where})" if where else "",
            "s" if len(nodes) != 1 else "",
            ", ".join(repr(m) for m in nodes),
            _duration(ran),
        )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
