"""Pure bookkeeping of a block store: ids, statuses, (block, row) addresses, pins.

:class:`BlockIndex` never looks at data. A *block* is an opaque handle holding ``n`` rows;
appending it assigns the contiguous ids ``start … start+n-1``, so sample ``i`` lives in row
``i - start`` of its block. Every store built on :class:`~kestrel_core.store._base.BlockStore`
keeps its blocks here (``{flat_key: ndarray}`` in memory, ``{flat_key: ObjectRef}`` in Ray), so
lifecycles and release rules are one implementation. Rows appended as invalid are dead
(TOMBSTONE) from the start. Every append is followed by :func:`kestrel_core.rotate`. A block is
*released* — its handle dropped, its rows marked DELETED — once every row is dead and no
checkout pins it.

Ids below the oldest block still held are all DELETED: the index forgets them (its arrays start
at :attr:`BlockIndex.first_kept_id`), so a run that simulates for hours keeps a bounded index
however many ids it assigns. They still count, as DELETED, in :meth:`BlockIndex.stats` and
:meth:`BlockIndex.status`; ids are never reused.

Shape symbols: M sample ids ever assigned, K ids returned by a checkout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kestrel_core._errors import StoreError
from kestrel_core.execute._boundary import check_count
from kestrel_core.store._lifecycle import LIVE, Status, rotate
from kestrel_core.store._rules import buffer_rules

__all__ = ["BlockIndex"]

_LIVE = np.array([int(s) for s in LIVE], dtype=np.int8)
#: the index forgets its DELETED ids below the oldest held block once they are at least this
#: many and half of the ids it holds (amortised O(1) per id)
COMPACT_AT = 4096


@dataclass
class _Block:
    handle: Any
    start: int
    n: int
    alive: int  # rows whose status is LIVE
    pins: int = 0
    ids: np.ndarray | None = None  # a restored block's ids (ascending); None: start … start+n-1
    on_disk: bool = False  # its handle was replaced by one that reads the journal (spill)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` (ids of this block) in the block."""
        return ids - self.start if self.ids is None else np.searchsorted(self.ids, ids)

    def all_ids(self) -> np.ndarray | slice:
        """Every id of the block (an index into the status array)."""
        return slice(self.start, self.start + self.n) if self.ids is None else self.ids


class BlockIndex:
    """Sample ids, statuses and block addresses of a buffer, without the data.

    Args:
        min_samples, max_samples, validation_samples: the buffer rules of
            :func:`kestrel_core.rotate` (``buffer`` config values, ≥ 0).
        seed: seed of the random subset drawn by ``checkout(max_samples=…)``.

    Raises:
        ConfigError: a rule value is not an integer ≥ 0 (``max_samples`` ≥ 1).
    """

    def __init__(
        self,
        *,
        min_samples: int = 0,
        max_samples: int = 2**62,
        validation_samples: int = 0,
        seed: int | None = None,
    ):
        self._rules = buffer_rules(
            min_samples=min_samples, max_samples=max_samples, validation_samples=validation_samples
        )
        self._status = np.zeros(0, np.int8)  # (capacity,): ids base…, valid up to self._size
        self._block_of = np.zeros(0, np.int64)
        self._base = 0  # the id at position 0 of the arrays; every id below it is DELETED
        self._size = 0
        self._live_start = 0  # every id below it is dead (TOMBSTONE or DELETED)
        self._blocks: dict[int, _Block] = {}
        self._next_block = 0
        self._memory_rows = 0  # rows of the held blocks whose handle is in memory (not spilled)
        # appended blocks still in memory, oldest first: the ones spill may hand to disk
        self._spillable: dict[int, None] = {}
        self._checkouts: dict[int, list[int]] = {}
        self._next_token = 0
        self._rng = np.random.default_rng(seed)

    # -- appending -------------------------------------------------------------------------
    def append(self, handle: Any, n: int, valid: np.ndarray | None = None) -> np.ndarray:
        """Add a block of ``n`` rows, apply the buffer rules, release dead blocks.

        Args:
            handle: the block (opaque).
            n: number of rows.
            valid: bool ``(n,)``; rows marked ``False`` are TOMBSTONE from the start (never
                readable). ``None``: every row is valid.

        Returns:
            int64 array ``(n,)``: the new sample ids (consecutive, invalid rows included).
        """
        n = int(n)
        start = self._size
        ids = np.arange(start, start + n, dtype=np.int64)
        if n == 0:
            return ids
        self._grow(start + n)
        b = self._next_block
        self._next_block += 1
        self._blocks[b] = _Block(handle=handle, start=start, n=n, alive=n)
        self._memory_rows += n
        self._spillable[b] = None
        self._status[start - self._base : start + n - self._base] = Status.VALIDATION
        self._block_of[start - self._base : start + n - self._base] = b
        self._size = start + n
        window = self._live_window()
        if valid is not None and not np.all(valid):
            window = window.copy()  # the invalid rows die with the rotation's other deaths
            window[start - self._live_start :][~np.asarray(valid, dtype=bool)] = Status.TOMBSTONE
        self._apply(self._live_start, rotate(window, **self._rules))
        self._advance()
        return ids

    def restore(
        self,
        handle: Any,
        ids: np.ndarray,
        statuses: np.ndarray | None = None,
        *,
        next_id: int = 0,
    ) -> np.ndarray:
        """Add a block of rows that keep the ids (and statuses) they had in an earlier store.

        A resumed run restores its buffer from a snapshot this way: the rows keep their ids, so
        ids are never reused across launches, and their statuses, so the validation set stays
        the same. The buffer rules run afterwards (they change nothing when the rules are those
        the snapshot was taken under).

        Args:
            handle: the block (opaque); row ``i`` holds id ``ids[i]``.
            ids: int64 ``(n,)``, strictly ascending, each ≥ every id assigned so far.
            statuses: int8 ``(n,)``, each VALIDATION, TRAINING or DISFAVOURED; ``None``: every
                row is new (VALIDATION, as an append).
            next_id: the first id later appends may use (the earlier store's id count); at
                least ``ids[-1] + 1``.

        Returns:
            ``ids`` as int64.

        Raises:
            StoreError: ids not strictly ascending or below an id already assigned; a status
                that is not readable; ``statuses`` of another length than ``ids``.
        """
        ids = np.asarray(ids, dtype=np.int64).ravel()
        n = len(ids)
        if n and (np.any(np.diff(ids) <= 0) or ids[0] < self._size):
            raise StoreError(
                f"restore: ids must be strictly ascending and ≥ {self._size} (the ids assigned "
                f"so far), got {ids[:1].tolist()}…{ids[-1:].tolist()}"
            )
        if statuses is None:
            status = np.full(n, Status.VALIDATION, np.int8)
        else:
            status = np.asarray(statuses).astype(np.int8).ravel()
            if status.shape != (n,):
                raise StoreError(f"restore: {len(status)} statuses for {n} ids")
            self._check_statuses(np.unique(status).tolist())
        size = max(int(next_id), int(ids[-1]) + 1 if n else 0, self._size)
        if n:
            self._grow(size)
            b = self._next_block
            self._next_block += 1
            self._blocks[b] = _Block(handle=handle, start=int(ids[0]), n=n, alive=n, ids=ids)
            self._memory_rows += n
            self._status[ids - self._base] = status
            self._block_of[ids - self._base] = b
        self._size = size
        if n:
            self._apply(self._live_start, rotate(self._live_window(), **self._rules))
            self._advance()
        return ids

    @property
    def rules(self) -> dict[str, int]:
        """``min_samples``, ``max_samples``, ``validation_samples``."""
        return dict(self._rules)

    @property
    def next_id(self) -> int:
        """The id the next appended row gets (ids assigned so far)."""
        return self._size

    @property
    def first_kept_id(self) -> int:
        """The lowest id the index still holds; every id below it is DELETED."""
        return self._base

    def _grow(self, size: int, cut: int = 0) -> None:
        """Room for ids up to ``size``, dropping the first ``cut`` held ids (all DELETED)."""
        need = size - self._base - cut
        if need <= len(self._status) and not cut:
            return
        cap = max(need, 2 * len(self._status) if not cut else 2 * need, 1024)
        kept = slice(cut, self._size - self._base)
        status = np.full(cap, Status.DELETED, np.int8)
        status[: kept.stop - cut] = self._status[kept]
        block_of = np.full(cap, -1, np.int64)
        block_of[: kept.stop - cut] = self._block_of[kept]
        self._status, self._block_of = status, block_of
        self._base += cut

    def _live_window(self) -> np.ndarray:
        """Statuses of ids ``live_start … size-1`` (a view)."""
        return self._status[self._live_start - self._base : self._size - self._base]

    def _advance(self) -> None:
        """Move ``live_start`` to the first live id; forget a long DELETED prefix."""
        alive = np.flatnonzero(np.isin(self._live_window(), _LIVE))
        self._live_start += int(alive[0]) if alive.size else self._size - self._live_start
        self._compact()

    def _compact(self) -> None:
        # blocks are numbered in id order, so the first one left holds the lowest id still held
        oldest = next(iter(self._blocks.values()), None)
        floor = self._live_start if oldest is None else min(self._live_start, oldest.start)
        cut = floor - self._base
        if cut >= max(COMPACT_AT, (self._size - self._base) // 2):
            self._grow(self._size, cut)

    def _apply(self, start: int, new: np.ndarray) -> None:
        """Store new statuses of ids ``start…``; count rows that died per block; release what can go."""
        old = self._status[start - self._base : self._size - self._base]
        died = np.flatnonzero(np.isin(old, _LIVE) & ~np.isin(new, _LIVE)) + start
        self._status[start - self._base : self._size - self._base] = new
        if died.size:
            blocks, counts = np.unique(self._block_of[died - self._base], return_counts=True)
            for b, c in zip(blocks.tolist(), counts.tolist()):
                self._blocks[b].alive -= c
            self._collect(blocks.tolist())

    def _collect(self, candidates: Sequence[int]) -> None:
        for b in candidates:
            blk = self._blocks.get(b)
            if blk is not None and blk.alive == 0 and blk.pins == 0:
                ids = blk.all_ids()
                if isinstance(ids, slice):
                    ids = slice(ids.start - self._base, ids.stop - self._base)
                else:
                    ids = ids - self._base
                self._status[ids] = Status.DELETED
                del self._blocks[b]  # drops the handle: for Ray, the last store ref to its objects
                if not blk.on_disk:
                    self._memory_rows -= blk.n
                    self._spillable.pop(b, None)

    # -- reading ---------------------------------------------------------------------------
    def checkout(
        self, statuses: Sequence[int], *, max_samples: int = 0, held_ids: np.ndarray | None = None
    ) -> tuple[int, np.ndarray, np.ndarray, list[tuple[Any, np.ndarray, np.ndarray]]]:
        """Pin the blocks holding the active ids the caller does not hold yet.

        Args:
            statuses: statuses that count as active (each must be LIVE).
            max_samples: if > 0, at most this many active ids: the held ones first, the rest
                drawn at random.
            held_ids: ids the caller already holds (any int array; unknown ids are ignored).

        Returns:
            ``(token, active_ids, new_ids, reads)``: ``active_ids`` int64 ``(A,)`` ascending;
            ``new_ids`` int64 ``(K,)`` ascending = the concatenation of the reads' ids;
            ``reads`` a list of ``(handle, rows, ids)`` with int64 ``rows``/``ids``, one per block.

        Raises:
            StoreError: a status is not one of VALIDATION, TRAINING, DISFAVOURED.
        """
        wanted = self._check_statuses(statuses)
        max_samples = check_count(max_samples, "max_samples")
        window = self._live_window()
        active = np.flatnonzero(np.isin(window, wanted)).astype(np.int64) + self._live_start
        held = (
            np.isin(active, np.asarray(held_ids, dtype=np.int64))
            if held_ids is not None and len(held_ids)
            else np.zeros(len(active), bool)
        )
        if 0 < max_samples < len(active):
            # Keep what the caller already holds (up to max_samples), fill up with a random
            # draw of the rest: a capped cache then only fetches what changed.
            kept = active[held][:max_samples]
            fresh = active[~held]
            extra = self._rng.choice(
                fresh, size=min(max_samples - len(kept), len(fresh)), replace=False
            )
            active = np.sort(np.concatenate([kept, extra]).astype(np.int64))
            held = np.isin(active, kept)
        new = active[~held]
        token = self._next_token
        self._next_token += 1
        reads = []
        pinned = []
        if new.size:
            block_of = self._block_of[new - self._base]
            cuts = np.flatnonzero(np.diff(block_of)) + 1
            for ids in np.split(new, cuts):
                b = int(self._block_of[ids[0] - self._base])
                blk = self._blocks[b]
                blk.pins += 1
                pinned.append(b)
                reads.append((blk.handle, blk.rows(ids), ids))
        self._checkouts[token] = pinned
        return token, active, new, reads

    def release(self, token: int) -> None:
        """Unpin the blocks of checkout ``token``; release those that are now dead.

        Raises:
            StoreError: ``token`` is unknown or was already released.
        """
        pinned = self._checkouts.pop(int(token), None)
        if pinned is None:
            raise StoreError(f"checkout token {token} is unknown or already released")
        for b in pinned:
            self._blocks[b].pins -= 1
        self._collect(pinned)

    # -- statuses --------------------------------------------------------------------------
    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Move TRAINING ids to DISFAVOURED; others are left unchanged. Returns how many moved."""
        ids = self._check_ids(ids)
        ids = ids[ids >= self._base]  # those below are DELETED
        moved = ids[self._status[ids - self._base] == Status.TRAINING]
        self._status[moved - self._base] = Status.DISFAVOURED
        return int(np.unique(moved).size)

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """int8 statuses of ``ids`` (a copy)."""
        ids = self._check_ids(ids)
        out = np.full(ids.shape, Status.DELETED, np.int8)
        held = ids >= self._base
        out[held] = self._status[ids[held] - self._base]
        return out

    @property
    def status_array(self) -> np.ndarray:
        """int8 ``(M,)`` copy of every id's status (the forgotten ids DELETED)."""
        out = np.full(self._size, Status.DELETED, np.int8)
        out[self._base :] = self._status[: self._size - self._base]
        return out

    def stats(self) -> dict[str, int]:
        """Counts per status plus ``total`` ids and live ``blocks``."""
        counts = np.bincount(self._status[: self._size - self._base], minlength=len(Status))
        counts[Status.DELETED] += self._base
        out = {s.name.lower(): int(counts[s]) for s in Status}
        out.update(total=int(self._size), blocks=len(self._blocks))
        return out

    def spill(
        self,
        keep_rows: int,
        make: Callable[[Any, int, int], Any],
        ready: Callable[[int, int], bool],
    ) -> int:
        """Hand the oldest blocks to disk until at most ``keep_rows`` rows are held in memory.

        A block goes when its handle is in memory, it was appended (not restored) and
        ``ready(first_id, n)`` says its ids are on disk; its handle becomes
        ``make(handle, first_id, n)``. Checkouts already issued keep the old handle.

        The rows in memory are counted as blocks come and go, and only blocks still in memory
        are visited, so a call costs O(1) plus the blocks it hands over, however many blocks
        the index holds.

        Returns:
            The rows handed to disk by this call.
        """
        moved = 0
        while self._memory_rows > keep_rows and self._spillable:
            b = next(iter(self._spillable))
            blk = self._blocks[b]
            if not ready(blk.start, blk.n):  # newer blocks are not on disk yet either
                break
            blk.handle, blk.on_disk = make(blk.handle, blk.start, blk.n), True
            del self._spillable[b]
            self._memory_rows -= blk.n
            moved += blk.n
        return moved

    @property
    def memory_rows(self) -> int:
        """Rows of the held blocks whose handle is in memory (not handed to disk)."""
        return self._memory_rows

    def disk_rows(self) -> tuple[int, int]:
        """``(live rows, all rows)`` of the blocks handed to disk and not yet released."""
        alive = total = 0
        for blk in self._blocks.values():
            if blk.on_disk:
                alive, total = alive + blk.alive, total + blk.n
        return alive, total

    def handles(self) -> list[Any]:
        """The handles of every block not yet released (pinned or holding live rows)."""
        return [blk.handle for blk in self._blocks.values()]

    @property
    def open_checkouts(self) -> int:
        """Number of checkouts not yet released."""
        return len(self._checkouts)

    def _check_ids(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.size == 0:
            return np.zeros(0, np.int64)
        if arr.dtype.kind not in "iu":
            raise StoreError(f"sample ids must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64).ravel()
        bad = arr[(arr < 0) | (arr >= self._size)]
        if bad.size:
            raise StoreError(
                f"unknown sample id {int(bad[0])}: the store has ids 0..{self._size - 1}"
            )
        return arr

    @staticmethod
    def _check_statuses(statuses: Sequence[int]) -> np.ndarray:
        out = []
        for s in np.atleast_1d(np.asarray(statuses)).tolist():
            if s not in [int(x) for x in LIVE]:
                name = Status(s).name if s in Status._value2member_map_ else "unknown"
                raise StoreError(
                    f"checkout: status {s} ({name}) is not readable; use one of "
                    + ", ".join(f"{x.name}={int(x)}" for x in LIVE)
                )
            out.append(s)
        return np.asarray(out, np.int8)
