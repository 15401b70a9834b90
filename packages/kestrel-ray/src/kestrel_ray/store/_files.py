"""The driver's files of a store: snapshot rows and the journal of appends.

The store actor never touches a disk (the run directory lives with the driver, possibly on
another machine). What it hands back, the driver's :class:`~kestrel_ray.StoreHandle` writes
through the :class:`StoreFiles` it holds (shared with its
:meth:`~kestrel_ray.StoreHandle.with_options` copies; a handle sent to an actor has none):

* the per-sample snapshots an append names (``Appended.snapshots``, ``buffer.snapshot_every``):
  :meth:`StoreFiles.write_snapshots`;
* with a journal attached (:meth:`StoreFiles.set_journal`; a launch attaches
  :class:`kestrel.persist._journal.JournalWriter`), every append that succeeded: the blocks
  :meth:`~kestrel_ray.StoreHandle.submit_append` sent are remembered until
  :meth:`~kestrel_ray.StoreHandle.appended` has the store's answer, then passed to the
  journal's ``write`` with their new ids. Every append goes through those two methods, so none
  escapes the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kestrel_core import BlockMeta
from kestrel_core.store import write_snapshots

__all__ = ["StoreFiles", "JournalHook"]

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


class StoreFiles:
    """The driver's files of one store: its snapshot folder and its journal of appends.

    Args:
        snapshot_dir: where :meth:`write_snapshots` writes (``None``: it writes nothing).

    Attributes:
        snapshot_dir: as given.
        hook: the :class:`JournalHook` (the journal attached and the appends in flight).
    """

    def __init__(self, snapshot_dir: str | None = None) -> None:
        self.snapshot_dir = snapshot_dir
        self.hook = JournalHook()

    def set_journal(self, journal: Any) -> None:
        """From now on :meth:`~kestrel_ray.StoreHandle.appended` calls
        ``journal.write(blocks, ids)`` for every append that succeeded (``blocks``: the
        ``[(block, meta), …]`` submitted, ``block`` ``{flat_key: ObjectRef}``; ``ids``: their
        int64 ids in order); its errors reach the caller. ``None`` stops."""
        self.hook.writer = journal
        self.hook.pending.clear()

    @property
    def journal(self) -> Any:
        """The journal attached (``None``: none)."""
        return self.hook.writer

    def write_snapshots(
        self, due: Sequence[tuple[np.ndarray, np.ndarray, Any]], wait: Callable[[list[Any]], Any]
    ) -> int:
        """Write the snapshots an append returned as due (``Appended.snapshots``); returns how many.

        The driver's side of snapshots: the store names the rows, this reads their blocks
        (one batched ``wait``, the handle's) and writes ``<snapshot_dir>/<id>.npz``. A no-op
        without snapshot folder.

        Args:
            due: ``[(ids, rows, block), …]``, ``block`` ``{flat_key: ObjectRef}``.
            wait: refs → their values (:meth:`~kestrel_ray.StoreHandle.wait`).

        Raises:
            OSError: a file cannot be written.
        """
        if self.snapshot_dir is None or not due:
            return 0
        refs = [[block[k] for k in sorted(block)] for _, _, block in due]
        values = wait([ref for group in refs for ref in group])
        pos, written = 0, 0
        for ids, rows, block in due:
            keys = sorted(block)
            arrays = {k: np.asarray(v) for k, v in zip(keys, values[pos : pos + len(keys)])}
            pos += len(keys)
            write_snapshots(self.snapshot_dir, ids, rows, arrays)
            written += len(rows)
        return written
