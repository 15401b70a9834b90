"""The launch's buffer journal: every append on disk, replayed on resume, kept as the bank.

A launch's buffer is on disk as its last snapshot (``buffer.npz``: at the end, on failure, and
at every checkpoint, :mod:`._checkpoint`). Rows appended since would die with the store actor
or with a ``kill -9`` of the driver. With ``buffer.journal: true`` (the default):

* **write**: the launch loop hands every append of the launch — initial samples, initial
  simulation, resimulation rounds, the end-of-budget draws, rows reused from earlier runs — to
  :meth:`JournalWriter.write` right after the store accepted it
  (:class:`~kestrel.controller._appends.Appends`; the rows the resume puts back are not
  appended there, so they are not written again): the writer reads the append's blocks (one
  batched wait on the store's handle) and writes ``RUN/buffer/journal/<first id>-<last
  id>.npz`` (:func:`kestrel_core.store.write_journal`: atomic, fsynced, no pickle), then its
  line in the bank's manifest (origin and simulator digest: :mod:`._bank`);
* **keep**: no file is deleted once a snapshot holds its rows: the journal is the run's
  simulation bank (:mod:`._bank`), every row that reached the store, evicted ones included
  (``buffer.journal: false``: no journal, and no bank);
* **replay**: a resumed launch puts the snapshot back, then :func:`replay_journal` appends the
  journal's files beyond it in id order, block by block as they were appended, with their
  original ids — the store's id count continues where the snapshot's stopped, so a file that
  starts there gets its ids again and the buffer rules evict as they did; the files below the
  snapshot's id count are left alone (not read). A file that cannot be read (a ``.tmp`` of a
  write cut short, a truncated file) is skipped with a warning naming it and left on disk; rows
  after a gap keep their ids too (put back as new rows).

The cost is the driver reading every block it appends and writing it once; the writer times
both (:attr:`JournalWriter.seconds`), and the launch logs the total.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray

from kestrel.persist._bank import BankWriter
from kestrel_core import BlockMeta, StoreError
from kestrel_core.internal import DiskFullError
from kestrel_core.store import JournalBlock, journal_files, read_journal_file, write_journal

__all__ = ["JournalWriter", "Replayed", "replay_journal"]


class JournalWriter:
    """Writes each append the store accepted to the journal folder.

    A write that fails for lack of space (``ENOSPC``, ``EDQUOT``, ``EROFS``) raises
    :class:`~kestrel_core.internal.DiskFullError` (the launch stops once: every later write
    would fail too); its ``.tmp`` is removed and the journal files before it stay whole. Any
    other failed write (a block lost) is logged, not raised: the launch goes on without those
    rows on disk, as it would without a journal. The same holds for the chunk's line in the
    bank's manifest (a chunk without its line stays a journal file a resume replays, but is
    not listed in the bank).

    Args:
        folder: the journal folder (created at the first write). log: the driver's logger.
        bank: writes each chunk's manifest line (:class:`~kestrel.persist._bank.BankWriter`);
            ``None``: the files are written without one (not listed in a bank).

    Attributes:
        appends, rows, bytes: what was written. seconds: time spent reading the blocks
        (``fetch``) and writing the files (``write``). failed: appends not written.
    """

    def __init__(
        self, folder: str | os.PathLike[str], log: logging.Logger, bank: BankWriter | None = None
    ):
        self.folder, self.log, self.bank = os.fspath(folder), log, bank
        self.appends = self.rows = self.bytes = self.failed = 0
        self.seconds = {"fetch": 0.0, "write": 0.0}

    def write(
        self,
        store: Any,
        blocks: list[tuple[dict[str, Any], BlockMeta]],
        ids: np.ndarray,
        origin: str | Mapping[str, Any] = "initial simulation",
    ) -> None:
        """Write one append's rows, once the store accepted them.

        Args:
            store: the store's handle (:class:`~kestrel_ray.StoreHandle`) the append went to;
                its ``wait`` reads the blocks (one batched wait).
            blocks: the ``[(block, meta), …]`` submitted (``block``: ``{flat_key: ObjectRef}``).
            ids: the int64 ids the store gave their rows, in order.
            origin: the append's name (``"resimulation round 3"``, …) or its manifest fields
                (:func:`~kestrel.persist._bank.origin_of`).

        Raises:
            DiskFullError: the file cannot be written for lack of space (naming it and the
                space left); nothing of it stays on disk. Or its manifest line cannot (the
                file stays: a resume replays it).
        """
        blocks = [(block, meta) for block, meta in blocks if int(meta.n)]
        keys = sorted(blocks[0][0]) if blocks else []
        t0 = time.monotonic()
        try:
            values = store.wait([block[k] for block, _ in blocks for k in keys])
            t1 = time.monotonic()
            arrays: dict[str, list[np.ndarray]] = {k: [] for k in keys}
            valid = []
            for b, (_, meta) in enumerate(blocks):
                n = int(meta.n)
                for j, key in enumerate(keys):
                    arrays[key].append(np.asarray(values[b * len(keys) + j])[:n])
                valid.append(np.ones(n, bool) if meta.valid is None else np.asarray(meta.valid))
            rows = {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in arrays.items()}
            mask = np.concatenate(valid)
            path = write_journal(self.folder, ids, rows, mask, [int(m.n) for _, m in blocks])
        except DiskFullError:  # no space for it: the launch stops here, once
            self.failed += 1
            raise
        except (OSError, StoreError, ray.exceptions.RayError) as err:
            self.failed += 1
            self.log.warning(
                "journal: ids %d…%d not written (%s); if this launch dies they are lost",
                int(ids[0]),
                int(ids[-1]),
                str(err).splitlines()[0],
            )
            return
        if self.bank is not None:
            try:
                self.bank.record(path, ids, int(mask.sum()), origin)
            except DiskFullError:  # no space for its line: the launch stops here, once
                self.failed += 1
                raise
            except OSError as err:
                self.log.warning(
                    "bank: %s not listed in its manifest (%s); a resume still replays it, but "
                    "a later --reuse does not see its rows",
                    path,
                    str(err).splitlines()[0],
                )
        t2 = time.monotonic()
        self.seconds["fetch"] += t1 - t0
        self.seconds["write"] += t2 - t1
        self.appends += 1
        self.rows += len(ids)
        self.bytes += sum(int(a.nbytes) for a in rows.values())

    def summary(self) -> str:
        """One line: what was written and what it cost."""
        return (
            f"{self.appends} appends, {self.rows} rows, {self.bytes / 2**20:.1f} MiB written in "
            f"{sum(self.seconds.values()):.2f} s (reading blocks {self.seconds['fetch']:.2f} s, "
            f"writing files {self.seconds['write']:.2f} s)"
            + (f"; {self.failed} appends not written" if self.failed else "")
        )


@dataclass
class Replayed:
    """What :func:`replay_journal` put back.

    Attributes:
        files: the files appended, in id order. rows: their rows. valid: of those, valid
        rows. invalid_by_id: ``(first id, invalid rows)`` per file (for the budget). next_id:
        the store's id count after the replay. skipped: files ignored (unreadable, unfinished).
    """

    files: list[str] = field(default_factory=list)
    rows: int = 0
    valid: int = 0
    invalid_by_id: list[tuple[int, int]] = field(default_factory=list)
    next_id: int = 0
    skipped: list[str] = field(default_factory=list)


def replay_journal(store: Any, folder: str, next_id: int, log: logging.Logger) -> Replayed:
    """Append the journal's files beyond ``next_id`` (the restored snapshot's id count) to
    ``store`` in id order, keeping their ids; returns what was put back.

    Files below ``next_id`` are the snapshot's already (the bank keeps them) and are left
    alone, unread.

    Raises:
        StoreError: the store refused a file's rows (another key schema: the message names the
            file); the files before it are in the store.
    """
    out = Replayed(next_id=int(next_id))
    for file in journal_files(folder):
        if file.last < out.next_id:
            continue
        try:
            if file.first < out.next_id:
                raise StoreError(f"{file.path}: ids overlap rows already restored")
            block = read_journal_file(file)
        except StoreError as err:
            log.warning("journal: ignored: %s", err)
            out.skipped.append(file.path)
            continue
        try:
            _put_back(store, block, gap=block.ids[0] != out.next_id)
        except StoreError as err:
            raise StoreError(f"journal: {file.path} does not fit this run's store: {err}") from err
        if block.ids[0] != out.next_id:
            log.warning(
                "journal: ids %d…%d are in neither the snapshot nor the journal (lost); the rows "
                "of %s keep their ids and enter as new rows",
                out.next_id,
                int(block.ids[0]) - 1,
                file.path,
            )
        out.files.append(file.path)
        out.rows += block.n
        out.valid += block.n - block.invalid
        out.invalid_by_id.append((int(block.ids[0]), block.invalid))
        out.next_id = int(block.ids[-1]) + 1
    return out


def _put_back(store: Any, block: JournalBlock, *, gap: bool) -> None:
    """Append ``block``'s blocks as they were appended (their ids follow the store's); after
    a gap, restore its valid rows with their ids instead (an append cannot skip ids)."""
    if gap:
        keep = block.valid
        arrays = {k: np.ascontiguousarray(a[keep]) for k, a in block.arrays.items()}
        refs = {k: ray.put(a) for k, a in arrays.items()}
        n = int(keep.sum())
        store.restore(refs, BlockMeta.of(arrays, n), block.ids[keep], next_id=block.ids[-1] + 1)
        return
    parts = []
    for arrays, valid in block.blocks():
        arrays = {k: np.ascontiguousarray(a) for k, a in arrays.items()}
        meta = BlockMeta.of(arrays, len(next(iter(arrays.values()))), valid=valid)
        parts.append(({k: ray.put(a) for k, a in arrays.items()}, meta))
    done = store.wait(store.submit_append(parts))
    if len(done.ids) != block.n or int(done.ids[0]) != int(block.ids[0]):
        raise StoreError(f"the store gave ids {int(done.ids[0])}… instead of {int(block.ids[0])}…")
