"""How the launch loop puts a trace into the store, and journals it once the store has it.

Every append of a launch — the rows of ``buffer.initial_samples_path``, the initial simulation,
the resimulation rounds, the end-of-budget draws — goes through the launcher's
:class:`Appends`:

1. :meth:`Appends.submit`: the trace's non-finite rows and the samples its simulators skipped
   (``on_error: skip``) are counted into the launch's result and logged; the trace's blocks
   (:meth:`kestrel_ray.RefTrace.blocks`, refs only) go to the store in one call, without
   waiting (the store keeps the invalid rows dead);
2. :meth:`Appends.finish`: once the store answered, the rows are handed to the journal
   (:class:`~kestrel.persist._journal.JournalWriter`: the blocks submitted, the ids the
   store gave them and the append's name — its origin in the bank; it reads the blocks and
   writes ``RUN/buffer/journal/<first>-<last>.npz`` and its line in the bank's manifest)
   before anything else happens on the driver, then the budget's id count and the launch's
   ``simulated`` count move on.

Rows reused from earlier runs' banks are blocks already (:meth:`Appends.append_blocks`): they
pass the same store append and journal, without the checks of a fresh simulation.

Since every append of the launch passes here, none escapes the journal; the journal is written
right after the store accepted the rows, as the store's own snapshot rows are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import ray

from kestrel.controller._budget import Budget
from kestrel.controller._result import RunResult
from kestrel.controller._skipped import count_errors
from kestrel.persist._journal import JournalWriter
from kestrel_ray import RefTrace, StoreHandle

__all__ = ["Appends"]


class Appends:
    """The appends of one launch (see the module docstring).

    Args:
        result: the launch's result (``simulated``, ``nonfinite`` and ``errors`` counted in
            place).
        budget: the run's budget (the ids its counters cover).
        log: the driver's logger.
        journal: where every accepted append is written (``None``: ``buffer.journal: false``).

    Attributes:
        first: ``time.monotonic()`` when the launch's first append was submitted (``None``:
            none yet); the progress rate counts from it.
    """

    def __init__(
        self,
        result: RunResult,
        budget: Budget,
        log: logging.Logger,
        journal: JournalWriter | None = None,
    ):
        self.result, self.budget, self.log, self.journal = result, budget, log, journal
        self.first: float | None = None
        # ref → (store, blocks, the append's origin in the bank)
        self._pending: dict[Any, tuple[StoreHandle, list[Any], Any]] = {}

    def submit(self, store: StoreHandle, trace: RefTrace, what: str) -> ray.ObjectRef:
        """Count a trace's non-finite and skipped rows, then append its blocks to ``store``
        without waiting; returns the append's ObjectRef (pass it to :meth:`finish`).

        Raises:
            StoreError: the trace's keys do not share blocks.
        """
        if self.first is None:
            self.first = time.monotonic()
        counts = trace.check_finite(what)
        count_errors(self.result.errors, trace, what, self.log)  # on_error: skip
        if any(counts.values()):
            for node, count in counts.items():
                self.result.nonfinite[node] = self.result.nonfinite.get(node, 0) + count
            valid = trace.valid_rows()
            dropped = 0 if valid is None else int((~valid).sum())
            self.log.warning(
                "%s: dropped %d of %d samples with non-finite values (per node: %s)",
                what,
                dropped,
                trace.n,
                {k: v for k, v in counts.items() if v},
            )
        blocks = trace.blocks()
        ref = store.submit_append(blocks)
        self._pending[ref] = (store, blocks, what)
        return ref

    def finish(self, ref: ray.ObjectRef) -> int:
        """Wait for the append ``ref``; journal its rows, count them; returns the valid rows
        kept.

        Raises:
            StoreError: the store refused the blocks (nothing of them was stored).
            OSError: a per-sample snapshot file cannot be written (a journal write that fails
                is logged by the journal, not raised).
        """
        store, blocks, origin = self._pending.pop(ref)
        done = store.appended(ref)
        if self.journal is not None and len(done.ids):
            self.journal.write(store, blocks, done.ids, origin)
        self.budget.covered(done.ids)
        for note in done.notes:
            self.log.warning("buffer: %s", note)
        self.result.simulated += done.kept  # the valid rows: what entered the buffer
        return int(done.kept)

    def append(self, store: StoreHandle, trace: RefTrace, what: str) -> int:
        """:meth:`submit`, then :meth:`finish`: returns the valid rows kept."""
        return self.finish(self.submit(store, trace, what))

    def append_blocks(
        self, store: StoreHandle, blocks: list[Any], origin: Mapping[str, Any]
    ) -> int:
        """Append blocks of rows read from disk (``[({flat key: ObjectRef}, BlockMeta)]``,
        every row valid) and journal them with ``origin`` (their manifest fields); returns the
        rows kept.

        Raises:
            StoreError: the store refused the blocks (another key schema; nothing stored).
        """
        if self.first is None:
            self.first = time.monotonic()
        ref = store.submit_append(blocks)
        self._pending[ref] = (store, blocks, dict(origin))
        return self.finish(ref)
