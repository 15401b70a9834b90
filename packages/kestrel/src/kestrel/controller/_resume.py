"""Continuing a run: its seed's stream per launch, the buffer put back, epochs, the best weights.

A launch on a run directory an earlier launch wrote continues that run
(:class:`~kestrel.controller._launcher.Launcher` uses :class:`Resume`):

* **seed**: the run keeps the seed of its first launch (``RUN/run.json``); launch ``k ≥ 2``
  draws from its own stream, ``SeedSequence(seed, spawn_key=(LAUNCH_KEY, k - 1))``
  (:func:`~kestrel.session._seeds.launch_seed`) — the same every time, and apart from launch 1's streams (the children
  ``(i,)`` and grandchildren ``(i, j)`` of ``SeedSequence(seed)``) and from every other launch;
* **buffer**: every launch that stops (completed, timeout, Ctrl-C) saves its whole buffer as
  ``<snapshots>/buffer.npz`` (:mod:`kestrel_core.store._buffer_file`); the next launch puts
  the rows back with their ids and statuses — the same validation set — instead of simulating
  a buffer from the prior; resimulation rounds then continue from the proposal; the rows
  appended after that snapshot come back from the journal (``RUN/buffer/journal/``,
  :mod:`kestrel.persist._journal`), with their ids, so a launch that died loses none;
* **epochs**: ``max_epochs`` is a total over the run's launches (the estimator's epoch counter
  continues from its checkpoint); ``kestrel launch --epochs N`` sets each estimator's
  ``max_epochs`` to its saved epoch count + N (:func:`add_epochs`);
* **best weights**: at the end of a launch that loaded weights, a node's files are replaced only
  when an epoch of this launch made a new best model — its estimator's ``best_epoch`` is past
  the epoch it was loaded at, i.e. an epoch beat the loaded best model on the same (restored)
  validation set. The replaced files are kept under ``<graph>/<node>/previous/``; otherwise the
  files stay as they were, byte for byte. The driver log says which happened.
"""

from __future__ import annotations

import logging
import os
import zipfile
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ray

from kestrel.controller._budget import Budget, write_budget
from kestrel.persist._journal import Replayed, replay_journal
from kestrel.rundir._rundir import SAVED_MARKER
from kestrel.rundir._runfiles import RunFileError, buffer_remedy, npz_problem, read_saved
from kestrel.session._seeds import LAUNCH_KEY, launch_seed
from kestrel_core import ConfigError, StoreError
from kestrel_core.internal import ESTIMATOR_FILE, DiskFullError, write_atomic
from kestrel_core.store import BUFFER_FILE, BufferSnapshot, read_buffer_file, write_buffer_file
from kestrel_ray.internal import restore_store, snapshot_store

if TYPE_CHECKING:  # the session and the launch's graph use this module
    from kestrel.rundir._rundir import RunDir
    from kestrel.session._session import RunSession
    from kestrel_core import RunConfig
    from kestrel_ray import DeployedGraph

__all__ = ["LAUNCH_KEY", "launch_seed", "add_epochs", "Resume", "PREVIOUS_DIR", "BufferMismatch"]

#: where a node's replaced weights are kept, inside ``<graph>/<node>/``
PREVIOUS_DIR = "previous"


def saved_epoch(run: RunDir, node: str, *, strict: bool = False) -> int:
    """The epoch count recorded with ``node``'s saved weights (0 when none were saved).

    Args:
        run: the :class:`~kestrel.rundir._rundir.RunDir`. node: the estimator node.
        strict: raise when ``saved.json`` is damaged (what :func:`add_epochs` counts from);
            ``False`` (messages of a failed launch): 0.

    Raises:
        RunFileError: (``strict``) ``saved.json`` is empty, not JSON, or its ``epoch`` is not
            a count (names the file and the remedy).
    """
    path = os.path.join(run.node_dir(node), SAVED_MARKER)
    try:
        saved = read_saved(path, run.root, node)
    except RunFileError:
        if strict:
            raise
        return 0
    return int((saved or {}).get("epoch", 0))


def add_epochs(config: RunConfig, run: RunDir, epochs: int) -> dict[str, int]:
    """Give every estimator ``epochs`` more: ``max_epochs`` = its saved epoch count + ``epochs``.

    Changes the estimator specs of ``config`` (the launch's own, loaded for it).

    Returns:
        node → its new ``max_epochs``.

    Raises:
        ConfigError: an estimator given as a live object (its options cannot be changed).
        RunFileError: (a ConfigError) a node's ``saved.json`` is damaged: its epoch count is
            unknown, so N more epochs cannot be counted (never 0 epochs silently).
    """
    totals = {}
    for node in config.graph.latents:
        spec = config.graph[node].estimator
        assert spec is not None  # a latent is a node with an estimator
        if spec.is_live:
            raise ConfigError(
                f"--epochs: node {node!r}'s estimator is an object, not a _target_ config; "
                "set its max_epochs (a total over the run's launches) instead"
            )
        totals[node] = saved_epoch(run, node, strict=True) + int(epochs)
        spec.kwargs["max_epochs"] = totals[node]
    return totals


def read_snapshot(run: RunDir) -> BufferSnapshot | None:
    """The run's saved buffer (:func:`~kestrel_core.store.read_buffer_file`), ``None`` without
    one.

    Raises:
        RunFileError: the snapshot is empty, cut short or damaged (a resume checked its table
            of contents before it started; this finds damage inside its arrays).
    """
    path = os.path.join(run.snapshots, BUFFER_FILE)
    try:
        return read_buffer_file(run.snapshots)
    except (StoreError, zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as err:
        where = path if os.path.exists(path) else run.snapshots
        if isinstance(err, StoreError):  # its message names the file: said once, in front
            problem = " ".join(str(err).split()).replace(f"{where}: ", "")
            problem = problem.replace(f" {where}", "")
        else:
            problem = npz_problem(err)
        raise RunFileError(where, problem, buffer_remedy(run.root, where)) from None


class BufferMismatch(ConfigError):
    """The run's saved buffer (snapshot or journal) does not fit its graph: the rows were made
    by another simulator (key, per-sample shape). Continuing cannot help; ``--restart`` can."""


def _remedy(root: str, what: str) -> str:
    """How to go on when the saved rows do not fit: they (and the weights trained on them)
    belong to another simulator."""
    return (
        f"The rows saved in {root} do not fit this run (made by a simulator with other keys "
        f"or shapes); start the run again with `kestrel launch -o {root} --restart` (its old "
        f"contents move to {os.path.join(root, PREVIOUS_DIR)}/N/), or move {what} away to go "
        "on without its rows"
    )


def _estimator(status: Mapping[str, Any], node: str) -> dict[str, Any]:
    return dict((status.get(node) or {}).get("estimator") or {})


class Resume:
    """What a launch continues from, and what it keeps: buffer snapshot, loaded epochs, weights.

    Args:
        session: the launch's :class:`~kestrel.session._session.RunSession`.
        log: the driver's logger.
        budget: the launch's :class:`~kestrel.controller._budget.Budget`, written beside every
            snapshot (``None``: not written).

    Attributes:
        loaded: node → its estimator's status right after its weights were loaded.
        restored: the buffer snapshot put back (``None``: none was).
        replayed: the journal's rows put back after it (``None``: before
            :meth:`restore_buffer`).
        saved_rows: the rows of the last buffer snapshot written (``None``: none yet).
        budget: as given.
    """

    def __init__(self, session: RunSession, log: logging.Logger, *, budget: Budget | None = None):
        self.session = session
        self.log = log
        self.budget = budget
        self.loaded: dict[str, dict[str, Any]] = {}
        self.restored: BufferSnapshot | None = None
        self.replayed: Replayed | None = None
        self.saved_rows: int | None = None
        self._kept: set[str] = set()  # nodes whose loaded weights are in previous/ already

    # -- start ---------------------------------------------------------------------------------
    def load_weights(self, dg: DeployedGraph) -> list[str]:
        """Load the saved weights; note each node's epoch and best epoch. Returns the nodes."""
        nodes = self.session.load_weights(dg, self.session.saved_nodes())
        if not nodes:
            self.log.info("starting fresh (no saved weights in %s)", self.session.run.graph)
            return nodes
        try:
            status = dg.status(timeout=30.0)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError, StoreError) as err:
            self.log.warning("resume: the estimators' epochs are unknown (%s)", err)
            status = {}
        self.loaded = {node: _estimator(status, node) for node in nodes}
        self.log.info("resume: loaded saved weights of %s", nodes)
        for node, est in self.loaded.items():
            epoch, total = est.get("epoch"), est.get("max_epochs")
            self.log.info(
                "resume: node %s at epoch %s of max_epochs %s (a total over the run's launches)",
                node,
                epoch,
                total,
            )
            if epoch is not None and total is not None and int(epoch) >= int(total):
                self.log.info(
                    "node %s: max_epochs %s is reached; it trains on only while rounds of "
                    "budget.simulations are still to come (add epochs with "
                    "`kestrel launch -o RUN --epochs N` or graph.%s.estimator.max_epochs=…)",
                    node,
                    total,
                    node,
                )
        return nodes

    def restore_buffer(self, dg: DeployedGraph) -> int:
        """Put the run's saved buffer into the new store, then the journal's rows beyond it;
        returns the valid rows put back (0: none).

        Every restored row is checked against the run's key schema (the per-sample shapes
        the dry run and the observations fixed, given to the store by
        :meth:`~kestrel.session._session.RunSession.deployed`): rows of a simulator whose
        shape was wrong are never trained on again.

        Raises:
            BufferMismatch: (a ConfigError) the snapshot or a journal file does not fit the
                graph (keys, shapes): the message names the node, the key, both shapes and the
                remedy (``--restart``).
            RunFileError: (a ConfigError) the snapshot cannot be read (cut short, damaged):
                one line naming it and the remedy (move it away, or ``--restart``).
        """
        run = self.session.run
        snapshot = read_snapshot(run)
        if snapshot is not None:
            try:
                restore_store(dg.store, snapshot)
            except StoreError as err:
                raise BufferMismatch(
                    f"buffer: the snapshot {snapshot.source} does not fit this run's graph: "
                    f"{err}. {_remedy(run.root, 'the snapshot')}"
                ) from err
            self.restored = snapshot
            what = "" if snapshot.statuses is not None else " (per-sample snapshots: rows as new)"
            self.log.info(
                "resume: buffer restored from %s%s: %s (its rows are not simulated again)",
                snapshot.source,
                what,
                snapshot.counts(),
            )
        try:
            self.replayed = replay_journal(
                dg.store, run.journal, snapshot.next_id if snapshot is not None else 0, self.log
            )
        except StoreError as err:
            raise BufferMismatch(f"buffer: {err}. {_remedy(run.root, 'the journal')}") from err
        if self.replayed.files:
            self.log.info(
                "resume: journal: %d rows (%d valid) of %d files appended after the snapshot, "
                "ids up to %d",
                self.replayed.rows,
                self.replayed.valid,
                len(self.replayed.files),
                self.replayed.next_id - 1,
            )
        return (snapshot.n if snapshot is not None else 0) + self.replayed.valid

    # -- end -----------------------------------------------------------------------------------
    def save_buffer(self, dg: DeployedGraph, *, quiet: bool = False) -> str | None:
        """Write the whole buffer to ``<snapshots>/buffer.npz``; returns the path (``None``:
        an empty store). A failure is logged, not raised: the weights matter more — except
        :class:`~kestrel_core.internal.DiskFullError` (no space: the launch stops once; the
        old ``buffer.npz`` and the journal stay as they were).
        ``quiet``: no log line for a snapshot written (a checkpoint logs its own)."""
        try:
            snapshot = snapshot_store(dg.store)
            if snapshot is None:
                return None
            path = self.write_snapshot(snapshot)
        except DiskFullError:  # no space: the launch stops (the old snapshot stays whole)
            raise
        except (OSError, StoreError) as err:
            self.log.warning("buffer: snapshot not saved: %s", err)
            return None
        if not quiet:
            self.log.info("buffer: snapshot saved to %s (%s)", path, snapshot.counts())
        return path

    def write_snapshot(self, snapshot: BufferSnapshot) -> str:
        """Write ``snapshot`` as ``buffer.npz`` and the budget beside it; returns the path. The
        journal files it holds stay: they are the run's simulation bank
        (:mod:`kestrel.persist._bank`), and a resume replays only the files beyond it.

        Raises:
            OSError: ``buffer.npz`` cannot be written (the journal is left as it was).
        """
        run = self.session.run
        path = write_buffer_file(run.snapshots, snapshot)
        self.saved_rows = snapshot.n
        if self.budget is not None:
            write_budget(run.snapshots, self.budget)
        return path

    def save_weights(
        self, dg: DeployedGraph, status: Mapping[str, Any], result: dict[str, int]
    ) -> None:
        """Save the weights of every node with a finished epoch, except those of loaded nodes
        that no epoch of this launch improved.

        Args:
            dg: the deployed graph. status: :meth:`DeployedGraph.status` now.
            result: node → epoch count, updated from ``status`` (the launch's result).
        """
        epochs = {}
        for node in self.session.config.graph.latents:
            est = _estimator(status, node)
            result[node] = int(est.get("epoch", result.get(node, 0)))
            if est.get("epoch"):
                epochs[node] = result[node]
            else:
                self.log.warning("node %s: no epoch finished; nothing to save", node)
        replace = {}
        for node, epoch in epochs.items():
            start = self.loaded.get(node)
            if start is None:
                replace[node] = epoch
                continue
            now = _estimator(status, node)
            best = now.get("best_epoch")
            if best is not None and int(best) <= int(start.get("epoch") or 0):
                self.log.info(
                    "node %s: weights kept: no epoch of this launch (%s → %s) beat the saved best "
                    "model (epoch %s, val loss %s on the same validation set); %s unchanged",
                    node,
                    start.get("epoch"),
                    epoch,
                    best,
                    now.get("best_val_loss"),
                    self.session.run.node_dir(node),
                )
                continue
            kept = self.keep_previous(node)
            self.log.info(
                "node %s: new best model (epoch %s, val loss %s; before: epoch %s, val loss %s); "
                "the previous weights are kept in %s",
                node,
                best,
                now.get("best_val_loss"),
                start.get("best_epoch"),
                start.get("best_val_loss"),
                kept,
            )
            replace[node] = epoch
        for node, folder in self.session.save_weights(dg, replace).items():
            self.log.info(
                "node %s: weights saved to %s (after epoch %d; best model: epoch %s)",
                node,
                folder,
                replace[node],
                _estimator(status, node).get("best_epoch"),
            )

    def keep_previous(self, node: str) -> str:
        """Copy ``node``'s saved weights (and their ``saved.json``) to ``<node>/previous/``,
        once per launch: after that the files there are the loaded ones and the node's own
        are this launch's (a checkpoint wrote them), so later calls copy nothing."""
        folder = self.session.run.node_dir(node)
        if node in self._kept:
            return os.path.join(folder, PREVIOUS_DIR)
        self._kept.add(node)
        return keep_previous(folder)


def keep_previous(folder: str) -> str:
    """Copy the estimator file and ``saved.json`` of ``folder`` into ``folder/previous/``
    (replacing an older copy); returns that folder.

    Raises:
        OSError: a file cannot be copied.
    """
    target = os.path.join(folder, PREVIOUS_DIR)
    os.makedirs(target, exist_ok=True)
    for name in (ESTIMATOR_FILE, SAVED_MARKER):
        source = os.path.join(folder, name)
        if os.path.isfile(source):  # through a temporary file: never a half copy
            with open(source, "rb") as fh:
                write_atomic(os.path.join(target, name), fh.read())
    return target
