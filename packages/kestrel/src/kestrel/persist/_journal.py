"""The launch's buffer journal: every append on disk, replayed on resume, kept as the bank.

A launch's buffer is on disk as its last snapshot (``buffer.npz``: at the end, on failure, and
at every checkpoint, :mod:`._checkpoint`). Rows appended since would die with the store actor
or with a ``kill -9`` of the driver. With ``buffer.journal: true`` (the default):

* **write**: the launch loop hands every append of the launch — initial samples, initial
  simulation, resimulation rounds, the end-of-budget draws, rows reused from earlier runs — to
  :meth:`JournalWriter.write` right after the store accepted it
  (:class:`~kestrel.controller._appends.Appends`; the rows the resume puts back are not
  appended there, so they are not written again): the writer reads the append's blocks
  (bounded waits, the launch's restart watch polled between two, then one batched read on the
  store's handle) and writes ``RUN/buffer/journal/<first id>-<last id>.npz``
  (:func:`kestrel_core.store.write_journal`: atomic, fsynced, no pickle), then its line in the
  bank's manifest (origin and simulator digest: :mod:`._bank`). A block whose only copy was
  lost with its node and that cannot be rebuilt (no node left for its replica) is left out,
  its ids named in a warning, never waited for without end;
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from kestrel.persist._bank import BankWriter
from kestrel_core import BlockMeta, KestrelError, StoreError
from kestrel_core.internal import DiskFullError
from kestrel_core.store import JournalBlock, journal_files, read_journal_file, write_journal

if TYPE_CHECKING:
    from kestrel_ray import StoreHandle

__all__ = ["JournalWriter", "Replayed", "replay_journal", "WAIT_EVERY"]

#: seconds of one wait for an append's blocks; :attr:`JournalWriter.between_waits` runs
#: between two
WAIT_EVERY = 1.0


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
        #: called between two waits for an append's blocks (the launch's restart watch,
        #: which raises once a replica has no node left); ``None``: nothing
        self.between_waits: Callable[[], Any] | None = None

    def write(
        self,
        store: StoreHandle,
        blocks: list[tuple[dict[str, Any], BlockMeta]],
        ids: np.ndarray,
        origin: str | Mapping[str, Any] = "initial simulation",
    ) -> None:
        """Write one append's rows, once the store accepted them.

        The blocks are waited for in waits of at most :data:`WAIT_EVERY` seconds, with
        :attr:`between_waits` called between two (the launch's restart watch: it raises once a
        replica has waited too long for a node, :mod:`kestrel.controller._restarts`), so a block
        whose only copy was lost with its node never holds the driver for ever. A block that
        cannot be read (lost for good: Ray could not rebuild it, or the watch gave up on its
        replica) is left out of the journal with a warning naming its ids; the append's other
        blocks are written (one file per run of contiguous ids).

        Args:
            store: the store's handle (:class:`~kestrel_ray.StoreHandle`) the append went to;
                its ``wait`` reads the blocks (one batched wait once every block is ready).
            blocks: the ``[(block, meta), …]`` submitted (``block``: ``{flat_key: ObjectRef}``).
            ids: the int64 ids the store gave their rows, in order.
            origin: the append's name (``"resimulation round 3"``, …) or its manifest fields
                (:func:`~kestrel.persist._bank.origin_of`).

        Raises:
            DiskFullError: the file cannot be written for lack of space (naming it and the
                space left); nothing of it stays on disk. Or its manifest line cannot (the
                file stays: a resume replays it).
            KestrelError: the one :attr:`between_waits` raised (the launch stops; the blocks
                read by then are written first, the others named in a warning).
        """
        ids = np.asarray(ids, dtype=np.int64)
        sizes = [int(meta.n) for _, meta in blocks]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        kept = [b for b, n in enumerate(sizes) if n]
        if not kept:
            return
        keys = sorted(blocks[kept[0]][0]) if kept else []
        t0 = time.monotonic()
        stopped: BaseException | None = None
        try:
            try:
                self._wait_ready([blocks[b][0][k] for b in kept for k in keys])
            except KestrelError as err:  # the restart watch gave up: write what is readable
                stopped = err
            values, lost = self._read(store, blocks, kept, keys)
        except (StoreError, ray.exceptions.RayError) as err:
            self.failed += 1
            self._warn_lost(ids, str(err).splitlines()[0])
            return
        t1 = time.monotonic()
        if lost:
            spans = ", ".join(f"{int(ids[starts[b]])}…{int(ids[starts[b + 1] - 1])}" for b in lost)
            self.failed += 1
            self.log.warning(
                "journal: ids %s not written: their blocks were lost with their node and "
                "could not be read%s; the launch's other rows are kept",
                spans,
                " (no node left to rebuild them)" if stopped is not None else "",
            )
        readable = [b for b in kept if b not in lost]
        # one file per run of blocks with contiguous ids (the blocks lost break a run)
        runs: list[list[int]] = []
        for b in readable:
            if runs and not any(runs[-1][-1] < c < b for c in lost):
                runs[-1].append(b)
            else:
                runs.append([b])
        for run in runs:
            self._write_run(blocks, ids, starts, run, keys, values, origin)
        t2 = time.monotonic()
        self.seconds["fetch"] += t1 - t0
        self.seconds["write"] += t2 - t1
        if stopped is not None:
            raise stopped

    def _wait_ready(self, refs: list[Any]) -> None:
        """Wait until every ref is ready (a value or an error), in waits of at most
        :data:`WAIT_EVERY` seconds with :attr:`between_waits` called between two."""
        pending = list(dict.fromkeys(r for r in refs if isinstance(r, ray.ObjectRef)))
        while pending:
            _, pending = ray.wait(
                pending, num_returns=len(pending), timeout=WAIT_EVERY, fetch_local=True
            )
            if pending and self.between_waits is not None:
                self.between_waits()

    def _read(
        self,
        store: StoreHandle,
        blocks: list[tuple[dict[str, Any], BlockMeta]],
        kept: list[int],
        keys: list[str],
    ) -> tuple[dict[int, list[Any]], list[int]]:
        """The values of the blocks ``kept`` (block → its keys' values) and the blocks that
        cannot be read (not ready, or lost for good: named by the caller)."""
        refs = [r for b in kept for r in blocks[b][0].values() if isinstance(r, ray.ObjectRef)]
        refs = list(dict.fromkeys(refs))
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)[0])
        whole = [
            b
            for b in kept
            if all(not isinstance(r := blocks[b][0][k], ray.ObjectRef) or r in ready for k in keys)
        ]
        values: dict[int, list[Any]] = {}
        try:
            got = store.wait([blocks[b][0][k] for b in whole for k in keys])
            for i, b in enumerate(whole):
                values[b] = got[i * len(keys) : (i + 1) * len(keys)]
        except (StoreError, ray.exceptions.RayError):  # one at least is lost: block by block
            for b in whole:
                try:
                    values[b] = store.wait([blocks[b][0][k] for k in keys])
                except (StoreError, ray.exceptions.RayError):
                    pass
        return values, [b for b in kept if b not in values]

    def _write_run(
        self,
        blocks: list[Any],
        ids: np.ndarray,
        starts: np.ndarray,
        run: list[int],
        keys: list[str],
        values: dict[int, list[Any]],
        origin: str | Mapping[str, Any],
    ) -> None:
        """Write the blocks ``run`` (contiguous ids) as one journal file and its manifest line."""
        part = ids[starts[run[0]] : starts[run[-1] + 1]]
        try:
            arrays: dict[str, list[np.ndarray]] = {k: [] for k in keys}
            valid = []
            for b in run:
                meta = blocks[b][1]
                n = int(meta.n)
                for j, key in enumerate(keys):
                    arrays[key].append(np.asarray(values[b][j])[:n])
                valid.append(np.ones(n, bool) if meta.valid is None else np.asarray(meta.valid))
            rows = {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in arrays.items()}
            mask = np.concatenate(valid)
            path = write_journal(self.folder, part, rows, mask, [int(blocks[b][1].n) for b in run])
        except DiskFullError:  # no space for it: the launch stops here, once
            self.failed += 1
            raise
        except (OSError, StoreError) as err:
            self.failed += 1
            self._warn_lost(part, str(err).splitlines()[0])
            return
        if self.bank is not None:
            try:
                self.bank.record(path, part, int(mask.sum()), origin)
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
        self.appends += 1
        self.rows += len(part)
        self.bytes += sum(int(a.nbytes) for a in rows.values())

    def _warn_lost(self, ids: np.ndarray, why: str) -> None:
        self.log.warning(
            "journal: ids %d…%d not written (%s); if this launch dies they are lost",
            int(ids[0]),
            int(ids[-1]),
            why,
        )

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


def replay_journal(store: StoreHandle, folder: str, next_id: int, log: logging.Logger) -> Replayed:
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


def _put_back(store: StoreHandle, block: JournalBlock, *, gap: bool) -> None:
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
