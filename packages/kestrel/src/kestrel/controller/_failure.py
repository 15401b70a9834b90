"""What a failed launch still saves, so that ``kestrel launch -o RUN`` continues it.

When a node fails — its simulator raises, an estimator's actor dies mid-epoch, the store actor
dies — :class:`~kestrel.controller._launcher.Launcher` calls :func:`save_on_failure` with the
error that ended its loop, before the actors are killed. The store is an actor of its own, apart from the node actors, so after a
node's death it still answers:

* the whole buffer goes to ``<snapshots>/buffer.npz`` (as at a graceful stop; the journal
  files it holds are deleted), unless the store itself is gone — then the snapshot of the last
  checkpoint (:mod:`kestrel.persist._checkpoint`) stays, and the journal
  (:mod:`kestrel.persist._journal`) holds every row appended since, which a resume appends after
  it;
* every estimator node whose actor still answers has its weights written under the resume
  rule (:meth:`~kestrel.persist._checkpoint.Checkpoint.save_weights`); a dead one's weights
  on disk stay as the last checkpoint (or the last launch) left them;
* the driver log says what was saved, what stays from where, and how to continue — except
  when the run's saved buffer does not fit its graph (rows of another simulator's shape, found
  on resume): then nothing is written and the log says to ``--restart``.

A launch that failed because a write found no space (:class:`~kestrel_core.internal.DiskFullError`:
``ENOSPC``, ``EDQUOT``, ``EROFS``) does not write the buffer again: the last snapshot and the
journal files already on disk hold every row stored before the failed write (the journal keeps
every file: it is the run's simulation bank), and a snapshot needs more space than the write that
failed. The weights are tried once (small files; the failed write's temporary file was
removed); nothing on disk is deleted. The error gets its remedy (free space, then
``kestrel launch -o RUN``).

Each step has a short timeout, so a failed launch still ends within seconds. A second Ctrl-C
(abort) saves nothing: it is not a failure.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import ray

from kestrel.controller._resume import BufferMismatch, Resume, saved_epoch
from kestrel.persist._checkpoint import Checkpoint
from kestrel.persist._journal import JournalWriter
from kestrel_core import KestrelError, StoreError
from kestrel_core.internal import DiskFullError
from kestrel_core.store import BUFFER_FILE, journal_files
from kestrel_ray.internal import snapshot_store

if TYPE_CHECKING:
    from kestrel.rundir._rundir import RunDir
    from kestrel_ray import DeployedGraph

__all__ = ["save_on_failure", "disk_full", "FAILURE_TIMEOUT"]

#: seconds each actor (the store, each estimator node) has to answer on the failure path
FAILURE_TIMEOUT = 10.0


def save_on_failure(
    dg: DeployedGraph,
    resume: Resume,
    err: BaseException,
    *,
    journal: JournalWriter | None = None,
) -> dict[str, Any]:
    """Save the buffer and the reachable estimators' weights of a launch that failed.

    Never raises (what cannot be saved is logged): the original error matters more.

    Args:
        dg: the launch's deployed graph (``None`` or no longer deployed: nothing is saved).
        resume: the launch's :class:`~kestrel.controller._resume.Resume` (its ``session``, its
            ``log``; it writes the buffer and keeps the replaced weights).
        err: the error that ended it (a :class:`~kestrel_ray.RunError` names its ``node``; a
            :class:`~kestrel_core.internal.DiskFullError` gets its ``remedy`` here).
        journal: the launch's journal writer (named in the log when the buffer could not be
            written: it holds the rows appended since the last snapshot).

    Returns:
        ``{"buffer": rows written or None, "weights": {node: epoch}, "gone": [node, …]}``
        (empty when nothing was deployed).
    """
    log = resume.log
    full = disk_full(err)
    if full is not None and full.remedy is None:
        full.remedy = (
            f"free space there, then continue the run with `kestrel launch -o "
            f"{resume.session.run.root}` (its complete files are kept)"
        )
    if dg is None or not dg.deployed:
        return {}
    try:
        return _save(dg, resume, journal, log, err)
    except Exception as problem:  # never hide the launch's own error
        log.warning("failure: saving what was left failed: %s: %s", type(problem).__name__, problem)
        return {}


def _save(
    dg: DeployedGraph,
    resume: Resume,
    journal: JournalWriter | None,
    log: logging.Logger,
    err: BaseException,
) -> dict[str, Any]:
    session = resume.session
    run = session.run
    if isinstance(err, BufferMismatch):  # the saved rows are another simulator's: keep them
        log.warning(
            "failure: the run's saved buffer does not fit its graph; nothing was changed on "
            "disk; start the run again with `kestrel launch -o %s --restart`",
            run.root,
        )
        return {"buffer": None, "weights": {}, "gone": []}
    nodes, gone = _estimator_status(dg, session.config.graph.latents)
    full = disk_full(err)
    if full is not None and journal is not None:  # the rows are on disk: write nothing big
        rows = None
        log.warning(
            "failure: no space for %s; the buffer is not written again: %s",
            full.path,
            _journal_text(run),
        )
    else:
        rows = _save_buffer(dg, resume, log)
        if rows is None and journal is not None and journal.appends:
            log.warning(
                "failure: the journal holds the rows appended since (%s)", journal.summary()
            )
    weights: dict[str, int] = {}
    checkpoint = Checkpoint(resume, log)
    # weights whose epoch is on disk already (the launch saved them) are not written again
    checkpoint.written = {n: e for n in nodes if (e := saved_epoch(run, n))}
    try:
        weights = checkpoint.save_weights(dg, nodes, skip=gone)
    except KestrelError as problem:  # DiskFullError too: the files on disk stay as they were
        log.warning("failure: weights not saved: %s", str(problem).splitlines()[0])
    for node in gone:
        epoch = saved_epoch(run, node)
        log.warning(
            "failure: node %r's actor is gone; %s",
            node,
            f"its weights on disk are those saved after epoch {epoch} (saved.json)"
            if epoch
            else "no weights of it were saved yet",
        )
    if weights:
        log.warning("failure: weights saved for %s (node → epoch)", weights)
    log.warning(
        "failure: %s; once the cause above is fixed, continue the run with `kestrel launch -o %s`",
        _on_disk(rows is not None or _has_snapshot(run), session.saved_nodes(), run),
        run.root,
    )
    return {"buffer": rows, "weights": weights, "gone": gone}


def disk_full(err: BaseException | None) -> DiskFullError | None:
    """The :class:`~kestrel_core.internal.DiskFullError` that ended a launch: ``err`` itself or
    one of its causes (``None``: the launch failed otherwise)."""
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, DiskFullError):
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def _journal_text(run: RunDir) -> str:
    """What the snapshot and the journal hold, in words (for the failure's log lines)."""
    files = [f for f in journal_files(run.journal) if f.complete]
    snapshot = "the last buffer snapshot" if _has_snapshot(run) else "no buffer snapshot"
    if not files:
        return f"{snapshot} and no journal file are on disk"
    return (
        f"{snapshot} and the journal's {len(files)} files (ids up to {files[-1].last}) are on "
        "disk and hold every row stored before it"
    )


def _on_disk(snapshot: bool, saved: list[str], run: RunDir | None = None) -> str:
    """What a continued launch finds on disk: the buffer snapshot (and the journal), and which
    nodes' weights."""
    journal = [f for f in journal_files(run.journal) if f.complete] if run is not None else []
    rows = f"the journal's rows (ids up to {journal[-1].last})" if journal else ""
    if snapshot:
        buffer = "the buffer snapshot is on disk" + (f", and {rows} beyond it" if rows else "")
    elif rows:
        buffer = f"no buffer snapshot, but {rows} on disk (a new launch puts them back)"
    else:
        buffer = "no buffer snapshot on disk (a new launch simulates the buffer again)"
    weights = (
        f"saved weights of {', '.join(repr(n) for n in saved)}"
        if saved
        else "no saved weights (a new launch trains from scratch)"
    )
    return f"{buffer}; {weights}"


def _estimator_status(
    dg: DeployedGraph, latents: list[str]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """node → its estimator's status, for the estimator nodes that answer; and those that do not."""
    refs = {node: dg.handle(node).status_refs()[0] for node in latents}
    nodes, gone = {}, []
    for node, ref in refs.items():
        try:
            nodes[node] = dict(ray.get(ref, timeout=FAILURE_TIMEOUT).get("estimator") or {})
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            gone.append(node)
    return nodes, gone


def _save_buffer(dg: DeployedGraph, resume: Resume, log: logging.Logger) -> int | None:
    """Write the store's whole buffer; ``None`` when the store is gone
    or empty (logged)."""
    run = resume.session.run
    try:
        snapshot = snapshot_store(dg.store.with_options(timeout=FAILURE_TIMEOUT))
        if snapshot is None or snapshot.n == 0:
            return None  # no readable row: whatever is on disk stays
        path = resume.write_snapshot(snapshot)
    except (StoreError, ray.exceptions.RayError, OSError) as problem:
        kept = "the last checkpoint's snapshot stays" if _has_snapshot(run) else "none"
        log.warning(
            "failure: the buffer snapshot was not written (%s); on disk: %s",
            str(problem).splitlines()[0],
            kept,
        )
        return None
    log.warning("failure: buffer snapshot saved to %s (%s)", path, snapshot.counts())
    return snapshot.n


def _has_snapshot(run: RunDir) -> bool:
    return os.path.isfile(os.path.join(run.snapshots, BUFFER_FILE))
