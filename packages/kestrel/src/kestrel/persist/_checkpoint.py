"""Checkpoints of a running launch: the buffer and the improved weights, about once a minute.

A launch writes its buffer snapshot (``<snapshots>/buffer.npz``) and its estimators' weights
when it stops — completed, ``--timeout``, Ctrl-C or SIGTERM. A launch that cannot stop
gracefully — its driver killed with ``kill -9``, its machine lost, an estimator's actor dead —
would leave nothing of itself. So while the estimators train, :class:`Checkpoint` writes the
same files every :data:`CHECKPOINT_EVERY` seconds, and ``kestrel launch -o RUN`` continues
from the latest:

* the whole buffer, with every row's id and status (written atomically, like the end-of-launch
  snapshot it is: :meth:`~kestrel.controller._resume.Resume.save_buffer`), when rows arrived
  since the last checkpoint;
* the weights of every estimator node whose epoch counter moved since the last checkpoint,
  under the resume rule of :mod:`._resume`: a node whose saved weights this launch loaded is
  written only once an epoch of this launch beat them, and the loaded files are first kept in
  ``<graph>/<node>/previous/`` (once per launch).

Reading a large buffer costs the driver time (its blocks travel to the driver), so the interval
stretches until checkpoints take at most :data:`CHECKPOINT_SHARE` of the driver's time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from kestrel_core import KestrelError
from kestrel_core.internal import DiskFullError

if TYPE_CHECKING:  # the launch's resume writes checkpoints with this module
    from kestrel.controller._resume import Resume
    from kestrel_ray import DeployedGraph

__all__ = ["Checkpoint", "CHECKPOINT_EVERY", "CHECKPOINT_SHARE"]

#: seconds between two checkpoints of a training launch (at least)
CHECKPOINT_EVERY = 60.0
#: the largest share of the driver's time that checkpoints may take (the interval stretches)
CHECKPOINT_SHARE = 0.1


class Checkpoint:
    """Writes a running launch's buffer snapshot and improved weights (module docstring).

    Args:
        resume: the launch's :class:`~kestrel.controller._resume.Resume` (what was loaded; it
            writes the buffer and keeps the replaced weights).
        log: the driver's logger.
        every: seconds between checkpoints (default :data:`CHECKPOINT_EVERY`).

    Attributes:
        written: node → the epoch of the weights this launch wrote for it.
        count: checkpoints written.
    """

    def __init__(self, resume: Resume, log: logging.Logger, *, every: float | None = None):
        self.resume = resume
        self.log = log
        self.every = CHECKPOINT_EVERY if every is None else float(every)
        self.written: dict[str, int] = {}
        self.count = 0
        self._rows: dict[str, int] | None = None  # the buffer counts at the last snapshot
        self._next = time.monotonic() + self.every

    def maybe(
        self,
        dg: DeployedGraph,
        nodes: Mapping[str, Mapping[str, Any]],
        buffer: dict[str, int] | None = None,
    ) -> bool:
        """Write a checkpoint if one is due; returns whether one was written.

        Args:
            dg: the deployed graph. nodes: estimator node → its estimator's status dict
                (``epoch``, ``best_epoch``). buffer: the store's counts now (unchanged counts:
                the buffer is not written again).

        Raises:
            DiskFullError: ``buffer.npz``, ``budget.json``, an estimator file or its
                ``saved.json`` cannot be written for lack of space. Each is written to a
                temporary file renamed only once complete, so the previous checkpoint's files
                stay whole, and the journal's files stay (the run's simulation bank).
        """
        if time.monotonic() < self._next:
            return False
        start = time.monotonic()
        try:
            saved_rows = self.save_buffer(dg, buffer)
            weights = self.save_weights(dg, nodes)
        except DiskFullError:  # no space: the launch stops once (the old files stay whole)
            raise
        except KestrelError as err:  # the launch notices a dead actor itself; log and go on
            self.log.warning("checkpoint: not written: %s", str(err).splitlines()[0])
            weights, saved_rows = {}, None
        took = time.monotonic() - start
        self._next = time.monotonic() + max(self.every, took / CHECKPOINT_SHARE)
        if saved_rows is not None or weights:
            self.count += 1
            self.log.info(
                "checkpoint %d: %s%s (%.2f s; next in %.0f s)",
                self.count,
                f"buffer ({saved_rows} rows)" if saved_rows is not None else "buffer unchanged",
                f", weights of {weights}" if weights else "",
                took,
                self._next - time.monotonic(),
            )
        return True

    def save_buffer(self, dg: DeployedGraph, buffer: dict[str, int] | None = None) -> int | None:
        """Write the buffer snapshot unless ``buffer`` (the store's counts) equals the counts
        of the last one; returns its rows (``None``: not written).

        Raises:
            DiskFullError: ``buffer.npz`` (or ``budget.json``) cannot be written for lack of
                space; the previous snapshot and the journal stay as they were.
        """
        if buffer is not None and buffer == self._rows:
            return None
        path = self.resume.save_buffer(dg, quiet=True)
        if path is None:
            return None
        self._rows = buffer
        return int(self.resume.saved_rows or 0)

    def save_weights(
        self, dg: DeployedGraph, nodes: Mapping[str, Mapping[str, Any]], skip: Collection[str] = ()
    ) -> dict[str, int]:
        """Write the weights of the nodes whose epoch moved since this launch last wrote them
        (the resume rule applies: see the module docstring); returns node → epoch written.

        Args:
            dg: the deployed graph. nodes: estimator node → its estimator's status dict.
            skip: nodes not to ask (their actor is gone).

        Raises:
            KestrelError: an estimator failed to save (naming the node).
            DiskFullError: a file cannot be written for lack of space (the old one stays).
        """
        due = {}
        for node in self.resume.session.config.graph.latents:
            est = nodes.get(node) or {}
            epoch, best = est.get("epoch"), est.get("best_epoch")
            if node in skip or not epoch or self.written.get(node) == int(epoch):
                continue
            loaded = self.resume.loaded.get(node)
            if loaded is not None and (best is None or int(best) <= int(loaded.get("epoch") or 0)):
                continue  # no epoch of this launch beat the loaded weights: they stay
            due[node] = int(epoch)
        for node in due:
            if node in self.resume.loaded:
                self.resume.keep_previous(node)  # once per launch
        self.resume.session.save_weights(dg, due)
        self.written.update(due)
        return due
