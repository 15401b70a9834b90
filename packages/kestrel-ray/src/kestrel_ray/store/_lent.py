"""The owner's copies of the blocks it lent to the store, dropped once nobody references them.

Ray keeps the value of a small task return (at most ``max_direct_call_object_size``, 100 KiB)
in the process that owns it (the core worker's in-process memory store), and a marker for a
larger one that lives in the object store. The owner deletes that entry when its own last
ObjectRef of the object goes away — but not when the last reference is a borrower's: an actor
that received the ref inside an argument and dropped it later (measured on Ray 2.60: the entry
stays for the life of the process, with no reference left in the owner's reference table).

That is every block of a launch: the driver owns the blocks its simulator calls return, hands
them to the store actor inside ``append_blocks`` (the store borrows them) and drops its own
refs once the append is done; the store drops its refs when it evicts the rows, last. The
driver kept every such entry: a float64 key of 8 192 rows is a 64 KiB entry, so the soak's
driver grew by 8.4 bytes a sample simulated (20 MiB a minute at 2.6 M samples a minute,
RELIABILITY.md "Soak: memory over a long run").

:class:`LentRefs` remembers the object ids its :class:`~kestrel_ray.store._handle.StoreHandle`
lent to the store and, at most every :data:`SWEEP_EVERY` seconds, removes the owner's entry of
each id that this process no longer references: a new ObjectRef of that id, released at once,
takes the path Ray deletes the entry on (the release of the last local reference). Ids still
referenced (the blocks the store holds, appends in flight) are kept for a later sweep; an id
nobody references can never be read again, so nothing that is used is ever removed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import ray

__all__ = ["SWEEP_EVERY", "LentRefs"]

#: seconds between two sweeps: what a sweep leaves is what was lent since the last one
SWEEP_EVERY = 5.0


class LentRefs:
    """The object ids a process lent to the store, and the sweep that drops their entries.

    Args:
        every: seconds between two sweeps of :meth:`maybe_sweep`.

    Attributes:
        released: ids whose entry the sweeps removed (unreferenced when swept).
        sweeps: sweeps run.
    """

    def __init__(self, every: float = SWEEP_EVERY):
        self.every = float(every)
        self.released = 0
        self.sweeps = 0
        self._ids: set[str] = set()  # hex object ids
        self._last = time.monotonic()

    def __len__(self) -> int:
        """Ids lent and not swept yet."""
        return len(self._ids)

    def lend(self, values: Iterable[Any]) -> None:
        """Remember the ObjectRefs among ``values`` (anything else is ignored)."""
        for value in values:
            if isinstance(value, ray.ObjectRef):
                self._ids.add(value.hex())

    def maybe_sweep(self) -> int:
        """:meth:`sweep` when :attr:`every` seconds passed since the last; returns the ids
        released (0 between sweeps)."""
        if time.monotonic() - self._last < self.every:
            return 0
        return self.sweep()

    def sweep(self) -> int:
        """Remove the owner's entry of every id lent that nothing in this process references
        any more; returns how many. A no-op where Ray does not run here or does not say which
        ids it references (they are then forgotten)."""
        self._last = time.monotonic()
        if not self._ids:
            return 0
        referenced = _referenced()
        if referenced is None:
            self._ids.clear()
            return 0
        gone = self._ids - referenced
        for hex_id in gone:
            ray.ObjectRef(bytes.fromhex(hex_id))  # a local reference, released at once
        self._ids -= gone
        self.sweeps += 1
        self.released += len(gone)
        return len(gone)


def _referenced() -> set[str] | None:
    """The hex ids of this process's reference table (``None``: not available)."""
    if not ray.is_initialized():
        return None
    core = getattr(ray._private.worker.global_worker, "core_worker", None)
    counts = getattr(core, "get_all_reference_counts", None)
    if counts is None:  # another Ray: nothing to sweep with
        return None
    table = counts()
    return {k.decode() if isinstance(k, bytes) else str(k) for k in table}
