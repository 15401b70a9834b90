"""The driver's files of a store: snapshot rows and the journal of appends.

The store actor never touches a disk (the run directory lives with the driver, possibly on
another machine). What it hands back, the driver's :class:`~kestrel_ray.StoreHandle` writes:

* the per-sample snapshots an append names (``Appended.snapshots``, ``buffer.snapshot_every``):
  :meth:`DriverFiles.write_snapshots`;
* with a journal attached (:meth:`DriverFiles.set_journal`; a launch attaches
  :class:`kestrel.persist._journal.JournalWriter`), every append that succeeded: the blocks
  :meth:`~kestrel_ray.StoreHandle.submit_append` sent are remembered until
  :meth:`~kestrel_ray.StoreHandle.appended` has the store's answer, then passed to the
  journal's ``write`` with their new ids. Every append goes through those two methods, so none
  escapes the journal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kestrel_core import BlockMeta
from kestrel_core.store import write_snapshots

__all__ = ["DriverFiles", "JournalHook"]

Blocks = list[tuple[dict[str, Any], BlockMeta]]


class JournalHook:
    """The journal a driver's handle writes to, and the blocks of its appends in flight.

    Attributes:
        writer: an object with ``write(blocks, ids)``, or ``None`` (no journal).
        pending: append ref → the ``[(block, meta), …]`` it sent (only while a writer is set).
    """

    def __init__(self) -> None:
        self.writer: Any = None
        self.pending: dict[Any, Blocks] = {}

    def submitted(self, ref: Any, blocks: Blocks) -> None:
        """An append was submitted: keep its blocks until its answer (with a writer only)."""
        if self.writer is not None:
            self.pending[ref] = blocks

    def take(self, ref: Any) -> Blocks | None:
        """The blocks of append ``ref`` (forgotten here), ``None`` when none were kept."""
        return self.pending.pop(ref, None)

    def done(self, blocks: Blocks | None, ids: np.ndarray) -> None:
        """The append of ``blocks`` succeeded with ``ids``: hand them to the writer."""
        if blocks is not None and self.writer is not None and len(ids):
            self.writer.write(blocks, ids)


class DriverFiles:
    """The file side of :class:`~kestrel_ray.StoreHandle` (a mixin: it uses ``self.wait``,
    ``self._snapshot_dir`` and ``self._journal``)."""

    _snapshot_dir: str | None
    _journal: JournalHook

    def wait(self, refs: Any) -> Any:  # the handle's
        raise NotImplementedError

    def set_journal(self, journal: Any) -> None:
        """From now on :meth:`~kestrel_ray.StoreHandle.appended` calls
        ``journal.write(blocks, ids)`` for every append that succeeded (``blocks``: the
        ``[(block, meta), …]`` submitted, ``block`` ``{flat_key: ObjectRef}``; ``ids``: their
        int64 ids in order); its errors reach the caller. ``None`` stops. Shared with the
        handle's :meth:`~kestrel_ray.StoreHandle.with_options` copies."""
        self._journal.writer = journal
        self._journal.pending.clear()

    @property
    def journal(self) -> Any:
        """The journal attached (``None``: none)."""
        return self._journal.writer

    def write_snapshots(self, due: Sequence[tuple[np.ndarray, np.ndarray, Any]]) -> int:
        """Write the snapshots an append returned as due (``Appended.snapshots``); returns how many.

        The driver's side of snapshots: the store names the rows, this handle reads their
        blocks (one batched ``ray.get``) and writes ``<snapshot_dir>/<id>.npz``. A no-op for a
        handle without snapshot folder (an actor's copy, a store without snapshots).

        Raises:
            OSError: a file cannot be written.
        """
        if self._snapshot_dir is None or not due:
            return 0
        refs = [[block[k] for k in sorted(block)] for _, _, block in due]
        values = self.wait([ref for group in refs for ref in group])
        pos, written = 0, 0
        for ids, rows, block in due:
            keys = sorted(block)
            arrays = {k: np.asarray(v) for k, v in zip(keys, values[pos : pos + len(keys)])}
            pos += len(keys)
            write_snapshots(self._snapshot_dir, ids, rows, arrays)
            written += len(rows)
        return written
