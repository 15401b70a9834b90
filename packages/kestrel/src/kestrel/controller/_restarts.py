"""Crashed node actors, as the driver of a launch sees them: counted, logged, logs reopened.

A simulator node's actor is restarted by Ray after its process dies (``max_restarts``, see
:mod:`kestrel_ray.cluster._resources`) and the call it was running is retried with the same seeds, so
the run goes on and draws the same numbers. Ray does this silently; :class:`RestartWatch`
makes it visible: it reads each actor's restart count from Ray's actor table (kept by the
cluster's control store, the GCS: it survives the actor), and for every new restart

* logs a warning on the driver's log (``node 'x': actor (replica 0) restarted after a crash
  (restart 1 of at most 3); the call it was running is retried``),
* adds it to ``restarts`` (node → count) — the launch's
  :attr:`~kestrel.RunResult.restarts`, written to ``status.json``,
* reopens the restarted actor's log collection (``RunNodeWrapper.open_log``: the new process
  collects nothing until told to).

Estimator nodes are never restarted (a fresh actor would drop the training state): their death
ends the launch (:mod:`._failure`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kestrel_ray.internal import actor_info

__all__ = ["RestartWatch", "actor_restarts"]

#: seconds between two reads of the actor table
POLL_EVERY = 1.0


def actor_restarts(actor: Any) -> int | None:
    """How often Ray restarted ``actor`` (``None``: unknown — no actor table, another Ray).

    Read from Ray's actor table (:func:`~kestrel_ray.node._timeout.actor_info`), the cluster's
    record of the actor, which outlives its processes.
    """
    info = actor_info(actor)
    return int(info["NumRestarts"]) if "NumRestarts" in info else None


class RestartWatch:
    """Counts the restarts of a launch's node actors (see the module docstring).

    Args:
        actors: node → its actors (replica ``i`` at index ``i``).
        log: the driver's logger.
        restarts: node → count, updated in place (the launch's ``RunResult.restarts``).
        max_restarts: node → the restarts Ray allows its actors (for the message).
        every: seconds between two reads of the actor table (:meth:`poll` does nothing sooner).
    """

    def __init__(
        self,
        actors: Mapping[str, Sequence[Any]],
        log: logging.Logger,
        restarts: dict[str, int],
        *,
        max_restarts: Mapping[str, int] | None = None,
        every: float = POLL_EVERY,
    ):
        self._actors = {name: list(group) for name, group in actors.items()}
        self._log = log
        self.restarts = restarts
        self._max = dict(max_restarts or {})
        self._every = float(every)
        self._seen: dict[tuple[str, int], int] = {}
        self._next = 0.0

    def poll(self, *, force: bool = False) -> dict[str, int]:
        """Read every actor's restart count (at most every ``every`` seconds unless ``force``);
        log and count the new restarts. Returns node → restarts so far (nodes with any)."""
        now = time.monotonic()
        if not force and now < self._next:
            return self.restarts
        self._next = now + self._every
        for name, group in self._actors.items():
            for i, actor in enumerate(group):
                count = actor_restarts(actor)
                before = self._seen.get((name, i), 0)
                if count is None or count <= before:
                    continue
                self._seen[name, i] = count
                self.restarts[name] = self.restarts.get(name, 0) + count - before
                most = self._max.get(name)
                self._log.warning(
                    "node %r: actor (replica %d) restarted after a crash (restart %d%s); the call "
                    "it was running is retried with the same seeds",
                    name,
                    i,
                    count,
                    f" of at most {most}" if most is not None else "",
                )
                reopen = getattr(actor, "open_log", None)
                if reopen is not None:
                    reopen.remote()  # the new process collects its log again
        return self.restarts
