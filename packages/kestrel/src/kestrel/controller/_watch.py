"""What :func:`~kestrel.launch` does at every progress poll besides reporting progress.

The launch loop calls its ``on_progress`` callback on the driver's main thread, at most every
half second and at each phase change (:class:`~kestrel.controller._launcher.Launcher`).
:class:`LaunchWatch` is that callback: it hands the state to the progress reporter, then

* counts the node actors Ray restarted after a crash (:class:`~._restarts.RestartWatch`, into
  the launch's ``RunResult.restarts``), once the actors are deployed;
* writes a checkpoint when one is due while the estimators train
  (:class:`~._checkpoint.Checkpoint`: buffer snapshot and improved weights), so that a launch
  that cannot stop gracefully still leaves a run to continue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kestrel.controller._restarts import RestartWatch
from kestrel.controller._states import Phase
from kestrel.persist._checkpoint import Checkpoint
from kestrel.report._progress import ProgressState
from kestrel_ray.internal import actor_options

__all__ = ["LaunchWatch"]


class LaunchWatch:
    """The ``on_progress`` callback of a launch (see the module docstring).

    Args:
        report: the progress reporter's ``update``.
        every: seconds between checkpoints (default
            :data:`~kestrel.persist._checkpoint.CHECKPOINT_EVERY`).

    Attributes:
        launcher: set by :func:`~kestrel.launch` once the launcher exists.
        checkpoint: the launch's :class:`Checkpoint` (once the actors are deployed).
    """

    def __init__(self, report: Callable[[ProgressState], None], *, every: float | None = None):
        self.report = report
        self.every = every
        self.launcher: Any = None
        self.checkpoint: Checkpoint | None = None
        self._restarts: RestartWatch | None = None
        self._phase: Phase | None = None

    def __call__(self, state: ProgressState) -> None:
        self.report(state)
        launcher = self.launcher
        if launcher is None or launcher.dg is None or not launcher.dg.deployed:
            return
        if self._restarts is None:
            graph = launcher.session.config.graph
            self._restarts = RestartWatch(
                launcher.dg.node_actors(),
                launcher.log,
                launcher.result.restarts,
                max_restarts={
                    name: int(actor_options(node).get("max_restarts", 0))
                    for name, node in graph.nodes.items()
                },
            )
            self.checkpoint = Checkpoint(launcher.resume, launcher.log, every=self.every)
        changed, self._phase = state.phase != self._phase, state.phase
        self._restarts.poll(force=changed)
        if state.phase is Phase.TRAINING and self.checkpoint is not None:
            self.checkpoint.maybe(launcher.dg, state.nodes, state.buffer or None)
