"""What :func:`~kestrel.launch` does at every progress poll besides reporting progress.

The launch loop calls its ``on_poll`` callback on the driver's main thread, at most every
half second and at each phase change, with the :class:`~kestrel.report._progress.ProgressState`
and the deployed graph (:class:`~kestrel.controller._launcher.Launcher`). :class:`LaunchWatch`
is that callback: it hands the state to the progress reporter, then

* counts the node actors Ray restarted after a crash (:class:`~._restarts.RestartWatch`, into
  the launch's ``RunResult.restarts``), once the actors are deployed;
* keeps the replicas of ``num_actors: auto`` nodes in step with the cluster's nodes
  (:class:`kestrel_ray.internal.AutoActors`: replicas for a node that joins, every 10 s at
  most);
* writes a checkpoint when one is due while the estimators train
  (:class:`~kestrel.persist._checkpoint.Checkpoint`: buffer snapshot and improved weights), so
  that a launch that cannot stop gracefully still leaves a run to continue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kestrel.controller._restarts import RestartWatch
from kestrel.controller._resume import Resume
from kestrel.controller._states import Phase
from kestrel.persist._checkpoint import Checkpoint
from kestrel.report._progress import ProgressState
from kestrel_ray.internal import AutoActors, actor_options

if TYPE_CHECKING:
    from kestrel_core import Graph
    from kestrel_ray import DeployedGraph

__all__ = ["LaunchWatch"]


class LaunchWatch:
    """The ``on_poll`` callback of a launch (see the module docstring).

    Args:
        report: the progress reporter's ``update``.
        resume: the launch's :class:`~kestrel.controller._resume.Resume` (a checkpoint writes
            through it).
        log: the driver's logger.
        restarts: node → restarts, updated in place (the launch's ``RunResult.restarts``).
        graph: the run's graph config (each node's ``max_restarts``, for the log line).
        every: seconds between checkpoints (default
            :data:`~kestrel.persist._checkpoint.CHECKPOINT_EVERY`).

    Attributes:
        checkpoint: the launch's :class:`Checkpoint` (once the actors are deployed).
    """

    def __init__(
        self,
        report: Callable[[ProgressState], None],
        *,
        resume: Resume,
        log: logging.Logger,
        restarts: dict[str, int],
        graph: Graph,
        every: float | None = None,
    ):
        self.report = report
        self.resume = resume
        self.log = log
        self.restarts = restarts
        self.max_restarts = {
            name: int(actor_options(node).get("max_restarts", 0))
            for name, node in graph.nodes.items()
        }
        self.every = every
        self.checkpoint: Checkpoint | None = None
        self._restarts: RestartWatch | None = None
        #: the replicas of num_actors: auto nodes, kept in step with the cluster
        self._auto: AutoActors | None = None
        self._counts: dict[str, int] = {}
        self._phase: Phase | None = None

    def __call__(self, state: ProgressState, dg: DeployedGraph) -> None:
        """One poll: ``state`` reported, then restarts and checkpoints on ``dg`` (the deployed
        graph; ``None`` or not deployed yet: nothing more)."""
        self.report(state)
        if dg is None or not dg.deployed:
            return
        restarts = self._watch(dg)
        changed, self._phase = state.phase != self._phase, state.phase
        if self._auto is not None and self._auto.names:  # num_actors: auto follows the nodes
            counts = self._auto.poll()
            if counts and counts != self._counts:
                self._counts = counts
                restarts.track(dg.node_actors())
        restarts.poll(force=changed)
        if state.phase is Phase.TRAINING and self.checkpoint is not None:
            self.checkpoint.maybe(dg, state.nodes, state.buffer or None)

    def _watch(self, dg: DeployedGraph) -> RestartWatch:
        """The restart watch, the checkpoint and the auto replicas of the deployed ``dg``
        (made at the first call); returns the restart watch."""
        if self._restarts is None:
            self._restarts = RestartWatch(
                dg.node_actors(), self.log, self.restarts, max_restarts=self.max_restarts
            )
            self.checkpoint = Checkpoint(self.resume, self.log, every=self.every)
            self._auto = AutoActors(dg, self.log)
            self._counts = {}
        return self._restarts

    def poll_restarts(self, dg: DeployedGraph | None = None) -> None:
        """Read the restart counts (at most every second) without reporting or checkpointing:
        what the launch does while it waits for blocks (the journal's
        :attr:`~kestrel.persist._journal.JournalWriter.between_waits`).

        Args:
            dg: the deployed graph (the watch starts on it if no poll did yet).

        Raises:
            SimulatorError: a restarted replica has waited too long for a node
                (:class:`~._restarts.RestartWatch`).
        """
        if self._restarts is None and dg is not None and dg.deployed:
            self._watch(dg)
        if self._restarts is not None:
            self._restarts.poll()
