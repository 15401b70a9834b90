"""``BlockStore``: the sample store's rules, written once, on metadata.

Key schema (:func:`~._meta.check_block`), ids, statuses and pins (:class:`~._index.BlockIndex`
with :func:`~kestrel_core.rotate`), invalid rows, the oversized-append note and snapshots all
live here. A concrete store says only what a block holds, through two hooks:

* ``_accept(block, meta, spec)`` — check the block's values against what ``meta`` says and
  return the handle to keep (copied arrays in memory; the ``{key: ObjectRef}`` dict in Ray);
* ``_read(handle)`` — the block's arrays, needed only when one of its rows is due for a snapshot.

:class:`~kestrel_core.InMemoryStore` and kestrel-ray's ``SampleStore`` actor are the two
subclasses. Shape symbols: n rows of a block, M sample ids so far.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kestrel_core._errors import ConfigError, StoreError, StoreWarning
from kestrel_core.store._disk import DiskPolicy, JournalCover, is_on_disk, on_disk_handle
from kestrel_core.store._index import BlockIndex
from kestrel_core.store._meta import Expected, Schema, check_block, check_expected
from kestrel_core.store._protocol import BlockMeta, BlockRead, Checkout
from kestrel_core.store._rules import buffer_int, oversized_note
from kestrel_core.store._snapshot import snapshot_rows, write_snapshots

__all__ = ["BlockStore", "Appended"]


class Appended(NamedTuple):
    """What :meth:`BlockStore.append_blocks` returns.

    Attributes:
        ids: int64 ``(n,)``: the new ids of every row appended, in order (invalid rows included).
        kept: how many of those rows were valid (entered the buffer readable).
        notes: warning texts for the caller to show (an append larger than the buffer).
        snapshots: ``[(ids, rows, block), …]`` due for a snapshot and not written by the store
            (a store without snapshot directory, whose files another process writes): a block's
            ids, the rows of it to save, what the block holds — the arguments of
            :func:`~kestrel_core.store._snapshot.write_snapshots` once read.
    """

    ids: np.ndarray
    kept: int
    notes: list[str]
    snapshots: list[tuple[np.ndarray, np.ndarray, Any]] = []


class BlockStore:
    """The :class:`~kestrel_core.SampleStore` contract on opaque blocks; thread-safe (one lock).

    Each appended block becomes ``n`` samples with new ids (never reused) and status VALIDATION
    (TOMBSTONE for rows ``meta.valid`` marks invalid); :func:`~kestrel_core.rotate` runs after
    every append. A block is dropped — its handle released, its rows marked DELETED — once all
    its rows are dead and no checkout pins it. The first non-empty append fixes the key schema;
    :meth:`expect` fixes keys' per-sample shapes before it (a run's dry run, its observations).

    Args:
        min_samples, max_samples, validation_samples: the ``buffer`` rules (see
            :func:`kestrel_core.rotate`).
        snapshot_every: save every k-th appended sample (see :mod:`._snapshot`); 0 disables.
        snapshot_dir: directory of the snapshots (created on first use); required when
            ``snapshot_every > 0``.
        seed: seed of the generator that draws ``checkout(max_samples=…)`` subsets.

    Raises:
        ConfigError: a count is not a non-negative integer, ``max_samples < 1``, or snapshots
            are asked for without a directory.
    """

    def __init__(
        self,
        *,
        min_samples: int = 0,
        max_samples: int = 2**62,
        validation_samples: int = 0,
        snapshot_every: int = 0,
        snapshot_dir: str | Path | None = None,
        seed: int | None = None,
    ) -> None:
        self._index = BlockIndex(
            min_samples=min_samples,
            max_samples=max_samples,
            validation_samples=validation_samples,
            seed=seed,
        )
        self._snapshot_every = buffer_int(snapshot_every or 0, "snapshot_every", 0)
        if self._snapshot_every and snapshot_dir is None and not self.returns_snapshots:
            raise ConfigError(
                f"buffer.snapshot_every={self._snapshot_every} needs a snapshot directory"
            )
        self._snapshot_dir = None if snapshot_dir is None else Path(snapshot_dir)
        self._schema: Schema | None = None
        self._row_bytes: tuple[Schema, int] | None = None  # (schema, bytes of one row of it)
        self._expected: dict[str, Expected] = {}
        self._lock = threading.RLock()

    #: without a snapshot directory, hand the rows due for a snapshot back to the caller
    #: (:attr:`Appended.snapshots`): a store whose files another process writes
    returns_snapshots = False
    #: the buffer's disk rule (:meth:`use_disk`); ``None``: every block in memory
    _disk: DiskPolicy | None = None

    # -- a buffer larger than memory ---------------------------------------------------------------
    def use_disk(self, policy: DiskPolicy | None) -> None:
        """Train from disk beyond ``policy``'s cache (``buffer.storage``).

        After every append, while more rows than the policy's cache are held in memory, the
        oldest appended blocks whose rows the journal holds (a complete file of the folder
        covers their ids: the driver journals an append once the store accepted it, so the
        newest blocks wait for a later append; a folder that does not exist here holds
        nothing, and the buffer then stays in memory) are handed to disk: their
        handles become :class:`~kestrel_core.store._disk.OnDisk` markers of the journal folder,
        which a view reads back (:func:`~kestrel_core.store._disk.resolve_on_disk`); the
        store's own data reference is dropped. Ids, statuses, eviction and pins are unchanged.
        :meth:`stats` then counts ``on_disk`` (live rows held only on disk) and
        ``disk_reads`` (rows checked out from disk).
        """
        with self._lock:
            self._disk = policy
            self._disk_files = JournalCover()
            self._disk_reads = 0
            self._disk_active = False

    def _spill(self) -> None:
        policy, schema = self._disk, self._schema
        if policy is None or policy.folder is None or not schema:
            return
        if self._row_bytes is None or self._row_bytes[0] is not schema:
            self._row_bytes = (schema, _row_bytes(schema))
        row_bytes = self._row_bytes[1]
        rules = self._index.rules
        keep = max(rules["max_samples"], rules["min_samples"]) + rules["validation_samples"]
        limit = policy.cache_rows(keep, row_bytes)
        if limit is None:
            return
        self._disk_active = True
        folder = policy.folder
        self._index.spill(
            limit,
            on_disk_handle(folder),
            lambda first, n: self._disk_files.covers(folder, first, n),
        )

    # -- what a block holds (subclasses) ----------------------------------------------------------
    def _accept(self, block: Mapping[str, Any], meta: BlockMeta, spec: Schema) -> Any:
        """Check the values of ``block`` against ``meta``; return the handle to keep.

        Raises:
            StoreError: a value is not what this store holds or not what ``meta`` says.
        """
        raise NotImplementedError

    def _read(self, handle: Any) -> Mapping[str, np.ndarray]:
        """The arrays ``(n, *D)`` of a kept block, by flat key."""
        raise NotImplementedError

    # -- the key schema -----------------------------------------------------------------------------
    def expect(self, expected: Mapping[str, Expected]) -> None:
        """Fix keys' per-sample shapes (and dtype kinds) before the first block arrives.

        A launch passes what its dry run and its observations fixed
        (:func:`kestrel.preflight._dryrun.expected_keys`): from then on every append and every
        restore is checked against them as well as against the schema the first block fixes,
        so a simulator whose per-sample shape changes between calls is refused at its first
        block of the other shape, and a buffer restored from an older run at once. Keys not
        named here are fixed by the first non-empty block, as before. Calls add to (and
        replace entries of) the expectations.

        Raises:
            StoreError: an entry is not an :class:`~kestrel_core.store.Expected`, or the rows
                already stored differ from it (nothing changes then).
        """
        with self._lock:
            entries = dict(expected)
            for key, want in entries.items():
                if not isinstance(want, Expected):
                    raise StoreError(
                        f"expect: key {key!r}: expected an Expected, got {type(want).__name__}"
                    )
            if self._schema is not None:
                check_expected(self._schema, entries, "a block already stored")
            self._expected.update(entries)

    def expected(self) -> dict[str, Expected]:
        """The expectations :meth:`expect` fixed (flat key → :class:`Expected`)."""
        with self._lock:
            return dict(self._expected)

    # -- append -----------------------------------------------------------------------------------
    def append(self, block: Mapping[str, Any], meta: BlockMeta) -> np.ndarray:
        """Append one block (the :class:`~kestrel_core.SampleStore` method).

        Args:
            block: flat key → the block's value for that key (what this store holds).
            meta: the block's :class:`~kestrel_core.BlockMeta`.

        Returns:
            int64 ``(n,)``: the new sample ids (invalid rows included).

        Raises:
            StoreError: as :meth:`append_blocks`; nothing is stored.

        Warns:
            StoreWarning: more rows than ``max_samples + validation_samples`` at once: the
                oldest rows of this very block become TOMBSTONE.
        """
        done = self.append_blocks([(block, meta)])
        for note in done.notes:
            warnings.warn(note, StoreWarning, stacklevel=2)
        return done.ids

    def append_blocks(self, blocks: Sequence[tuple[Mapping[str, Any], BlockMeta]]) -> Appended:
        """Append several ``(block, meta)`` in order, all or nothing; the rules run after each.

        Returns:
            :class:`Appended`: the ids of every block in order, how many rows were valid, and
            the warning texts (one when the call brings more valid rows than the buffer keeps)
            for the caller to show.

        Raises:
            StoreError: a block or its metadata is malformed, or differs from the key schema
                (fixed by the first non-empty append, and by :meth:`expect`); nothing of the
                call is stored then.
            CountError: a block's ``n`` is not a non-negative integer.
        """
        with self._lock:
            schema = self._schema
            checked = []
            for block, meta in blocks:
                spec = check_block(block, meta, schema, self._expected)
                handle = self._accept(block, meta, spec)
                if schema is None and meta.n:
                    schema = spec
                valid = None if meta.valid is None else np.asarray(meta.valid, dtype=bool)
                checked.append((handle, int(meta.n), valid))
            kept = sum(n if v is None else int(v.sum()) for _, n, v in checked)
            note = oversized_note(kept, self._index.rules)
            self._schema = schema
            out = [np.zeros(0, np.int64)]
            due: list[tuple[np.ndarray, np.ndarray, Any]] = []
            for handle, n, valid in checked:
                ids = self._index.append(handle, n, valid)
                out.append(ids)
                rows = snapshot_rows(ids, valid, self._snapshot_every)
                if rows.size and self._snapshot_dir is not None:
                    write_snapshots(self._snapshot_dir, ids, rows, self._read(handle))
                elif rows.size:
                    due.append((ids, rows, handle))
            self._spill()
            return Appended(np.concatenate(out), kept, [note] if note else [], due)

    def restore(
        self,
        block: Mapping[str, Any],
        meta: BlockMeta,
        ids: np.ndarray,
        statuses: np.ndarray | None = None,
        *,
        next_id: int = 0,
    ) -> int:
        """Put back rows saved from an earlier store, keeping their ids and statuses.

        A resumed run calls this on its new, empty store with its buffer snapshot
        (:mod:`._buffer_file`), instead of simulating a new buffer from the prior. The block is
        checked like an append — against the key schema and the expectations of :meth:`expect` —
        and fixes the key schema when it is the first; no snapshot file is written for restored
        rows.

        Args:
            block: flat key → the block's value for that key (what this store holds), row ``i``
                holding sample ``ids[i]``.
            meta: the block's :class:`~kestrel_core.BlockMeta` (``valid`` must be ``None``).
            ids: int64 ``(n,)``, strictly ascending, above every id assigned so far.
            statuses: int8 ``(n,)`` (VALIDATION, TRAINING or DISFAVOURED), or ``None`` for rows
                that enter as new (VALIDATION, then the buffer rules).
            next_id: the first id later appends use (the earlier store's id count).

        Returns:
            The number of rows restored.

        Raises:
            StoreError: a malformed block, one that differs from the key schema, ids or
                statuses that do not fit (see :meth:`BlockIndex.restore`); nothing is stored.
        """
        with self._lock:
            if meta.valid is not None:
                raise StoreError("restore: restored rows are valid rows (meta.valid must be None)")
            spec = check_block(
                block,
                meta,
                self._schema,
                self._expected,
                what=f"the block of {meta.n} restored rows",
            )
            ids = np.asarray(ids, dtype=np.int64).ravel()
            if len(ids) != meta.n:
                raise StoreError(f"restore: {len(ids)} ids for a block of {meta.n} rows")
            handle = self._accept(block, meta, spec)
            self._index.restore(handle, ids, statuses, next_id=next_id)
            if self._schema is None and meta.n:
                self._schema = spec
            return int(meta.n)

    # -- checkout / release -----------------------------------------------------------------------
    def checkout(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Checkout:
        """Pin and return the blocks holding the active ids the caller does not hold yet.

        Args:
            statuses: readable statuses to select (VALIDATION, TRAINING, DISFAVOURED).
            keys: flat keys to read; each ``BlockRead.block`` maps them to the block's values.
            max_samples: if > 0, at most this many active ids: the held ones first, the rest
                drawn at random.
            held_ids: ids the caller already holds (left out of ``new_ids``).

        Returns:
            A :class:`~kestrel_core.Checkout`; call :meth:`release` with its token.

        Raises:
            StoreError: a status is not readable, or a key is not in the schema (the message
                lists the schema).
        """
        keys = [str(k) for k in keys]
        with self._lock:
            if self._schema is not None:
                unknown = [k for k in keys if k not in self._schema]
                if unknown:
                    raise StoreError(
                        f"checkout: unknown key(s) {unknown}; the store holds "
                        f"{sorted(self._schema)}"
                    )
            token, active, new, reads = self._index.checkout(
                statuses, max_samples=max_samples, held_ids=held_ids
            )
            if self._disk is not None:
                self._disk_reads += sum(len(ids) for h, _, ids in reads if is_on_disk(h))
        return Checkout(
            token=token,
            active_ids=active,
            new_ids=new,
            reads=[
                BlockRead(block={k: handle[k] for k in keys}, rows=rows, ids=ids)
                for handle, rows, ids in reads
            ],
        )

    def release(self, token: int) -> None:
        """End a checkout; dead blocks it pinned are dropped.

        Raises:
            StoreError: unknown token (never issued, or already released).
        """
        with self._lock:
            self._index.release(token)

    # -- statuses ---------------------------------------------------------------------------------
    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED (others unchanged); return how many moved.

        Raises:
            StoreError: an id was never assigned.
        """
        with self._lock:
            return self._index.discard(ids)

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Statuses (int8, shape of ``ids`` flattened) of ``ids``.

        Raises:
            StoreError: an id was never assigned.
        """
        with self._lock:
            return self._index.status(ids)

    def stats(self) -> dict[str, int]:
        """Counts ``validation training disfavoured tombstone deleted total blocks``; for a
        buffer that trains from disk (:meth:`use_disk`) also ``on_disk`` (live rows held only
        in the journal) and ``disk_reads`` (rows checked out from it so far)."""
        with self._lock:
            out = self._index.stats()
            if self._disk is not None and self._disk_active:
                out.update(on_disk=self._index.disk_rows()[0], disk_reads=int(self._disk_reads))
            return out

    # -- for the subclasses' accessors ------------------------------------------------------------
    def _schema_copy(self) -> Schema | None:
        with self._lock:
            return None if self._schema is None else dict(self._schema)

    def _handles(self) -> list[Any]:
        with self._lock:
            return self._index.handles()


def _row_bytes(schema: Schema) -> int:
    """Bytes of one row of ``schema`` (every key's per-sample shape and dtype)."""
    return sum(
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        for shape, dtype in schema.values()
    )
