"""The run's simulation budget: how many simulations it may use over all its launches.

A simulation is counted when its row reaches the store — valid, or invalid (a NaN / ±inf
value, or a simulator call that raised under ``on_error: skip``; counted separately, since
they cost as much). Rows restored from the run's own buffer are not simulations of this
launch, nor are rows loaded from a ``buffer.initial_samples_path`` of the user's; a resumed run
counts on from what its saved buffer recorded (``<snapshots>/budget.json``, written with every
``buffer.npz``), so the budget is the run's, not the launch's.

Rows ``kestrel import`` brought into the run (its ``import/`` folder, which the run's config
names as ``initial_samples_path``; :mod:`kestrel.importing`) are simulations the run used,
made elsewhere: the first launch counts them in ``used`` when it appends them, so a
``budget.simulations`` of 10 000 + k over 10 000 imported rows simulates k more. Imported rows
that spend the budget leave nothing to simulate: the launch trains on them alone, or — when
they are fewer than ``min_samples + validation_samples`` — stops at start as a budget smaller
than the initial simulation does. Rows a launch reuses from earlier runs' simulation banks
(``--reuse``, :mod:`kestrel.persist._reuse`) count the same way.

``budget.json`` records with the counters the store's id count they cover (``ids``). Every id
assigned after it is a simulation (ids are never reused; only a first launch's initial samples
are not, and those come before), so a resumed launch counts each row of the snapshot and of the
journal (:mod:`._journal`) beyond ``ids`` once: used = recorded + (id count now − ``ids``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kestrel_core import ConfigError, RunConfig
from kestrel_core.internal import BUFFER_FILE, write_atomic

if TYPE_CHECKING:  # the journal's replay counts the budget with this module
    from kestrel.persist._journal import Replayed
    from kestrel_core.store import BufferSnapshot

__all__ = [
    "Budget",
    "BUDGET_FILE",
    "read_budget",
    "write_budget",
    "restore_counts",
    "check_initial_budget",
]

#: the budget's counters beside the buffer snapshot
BUDGET_FILE = "budget.json"


@dataclass
class Budget:
    """Simulations used against an optional total.

    Attributes:
        total: simulations the run may use (``None``: no budget).
        used: simulations whose rows reached the store, over the run's launches.
        invalid: of ``used``, rows that were invalid (non-finite or raised).
        stop_early: training may end with budget left (early stopping or ``max_epochs``).
        ids: the store's id count the counters cover (the end of the last append counted).
    """

    total: int | None = None
    used: int = 0
    invalid: int = 0
    stop_early: bool = False
    ids: int = 0

    @property
    def left(self) -> int | None:
        """Simulations left (``None``: no budget)."""
        return None if self.total is None else max(0, self.total - self.used)

    @property
    def spent(self) -> bool:
        """True when a budget is set and nothing is left."""
        return self.total is not None and self.used >= self.total

    @property
    def holds_training(self) -> bool:
        """True while training should wait for the budget's rounds (neither early stopping nor
        ``max_epochs`` ends it)."""
        return self.total is not None and not self.spent and not self.stop_early

    def take(self, n: int, reserved: int = 0) -> int:
        """How many of ``n`` wanted simulations the budget allows now, ``reserved`` of what is
        left being promised already (rounds drawn, not yet counted)."""
        left = self.left
        return int(n) if left is None else max(0, min(int(n), left - int(reserved)))

    def count(self, rows: int, invalid: int = 0) -> None:
        """``rows`` rows reached the store, ``invalid`` of them invalid."""
        self.used += int(rows)
        self.invalid += int(invalid)

    def covered(self, ids: np.ndarray) -> None:
        """An append's rows got ``ids`` (int64, ascending): the counters cover them."""
        if len(ids):
            self.ids = max(self.ids, int(ids[-1]) + 1)

    def check_initial(self, initial: int) -> None:
        """The initial simulation from the prior must fit the budget.

        Raises:
            ConfigError: it does not (names both numbers and the keys).
        """
        left = self.left
        if left is not None and initial > left:
            raise ConfigError(
                f"budget.simulations: {self.total} (of which {left} left) is smaller than the "
                f"initial simulation buffer.min_samples + buffer.validation_samples = {initial}; "
                "raise the budget or lower those buffer sizes"
            )

    def as_status(self) -> dict[str, Any]:
        """``{"total", "used", "invalid", "left"}`` for ``status.json``."""
        return {"total": self.total, "used": self.used, "invalid": self.invalid, "left": self.left}


def check_initial_budget(
    config: RunConfig, snapshots: str, fresh: bool = False, *, reused: int = 0
) -> None:
    """Before Ray starts: a launch that simulates its initial buffer must fit its budget.

    Args:
        config: the run's :class:`kestrel_core.RunConfig` (``buffer`` and ``budget``).
        snapshots: the run's snapshot folder (a ``buffer.npz`` there: a resume restores it,
            and its budget is checked once its counters are restored).
        fresh: the launch ignores what the folder holds (a restart).
        reused: rows of earlier runs the launch starts from (``--reuse``: checked with them
            by :func:`~kestrel.persist._reuse.plan_reuse`).

    Raises:
        ConfigError: as :meth:`Budget.check_initial`.
    """
    buffer = config.buffer
    if buffer is None or buffer.initial_samples_path or reused:
        return
    if not fresh and os.path.exists(os.path.join(snapshots, BUFFER_FILE)):
        return
    budget = Budget(config.budget.simulations, stop_early=config.budget.stop_early)
    budget.check_initial(buffer.min_samples + buffer.validation_samples)


def read_budget(folder: str) -> tuple[int, int, int | None] | None:
    """``(used, invalid, ids)`` recorded beside a saved buffer in ``folder`` (``None``: none;
    ``ids`` ``None`` in a file written before it was recorded).

    Raises:
        ConfigError: the file is not a budget record (names the file).
    """
    path = os.path.join(folder, BUDGET_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        ids = data.get("ids")
        return int(data["used"]), int(data.get("invalid", 0)), None if ids is None else int(ids)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"budget: cannot read {path}: {err}") from err


def write_budget(folder: str, budget: Budget) -> str:
    """Write the budget's counters to ``<folder>/budget.json`` (atomically); returns the path."""
    path = os.path.join(folder, BUDGET_FILE)
    counts = {
        "used": budget.used,
        "invalid": budget.invalid,
        "total": budget.total,
        "ids": budget.ids,
    }
    write_atomic(path, json.dumps(counts).encode("utf-8"))  # no .tmp left on a failed write
    return path


def restore_counts(
    budget: Budget,
    folder: str,
    restored: BufferSnapshot | None,
    replayed: Replayed | None = None,
) -> bool:
    """Set ``budget``'s counters from a resumed run's saved buffer in ``folder``.

    Args:
        budget: updated in place. folder: the snapshot folder. restored: the
            :class:`~kestrel_core.store._buffer_file.BufferSnapshot` put back (``None``: none).
        replayed: the journal's :class:`~kestrel.persist._journal.Replayed` (``None``: none).

    Returns:
        True if counters were found: ``budget.json`` plus every id assigned after the count it
        records (rows of the snapshot and the journal beyond it, each once); without the file,
        the id count, every row the run's store ever took.
    """
    end = max(
        int(restored.next_id) if restored is not None else 0,
        int(replayed.next_id) if replayed is not None else 0,
    )
    counts = read_budget(folder)
    if counts is None and end == 0:
        return False
    used, invalid, since = counts if counts is not None else (0, 0, 0)
    if since is None:  # an older budget.json: its counts cover the snapshot (no journal then)
        since = int(restored.next_id) if restored is not None else 0
    journal = replayed.invalid_by_id if replayed is not None else []
    budget.used = used + max(0, end - since)
    budget.invalid = invalid + sum(bad for first, bad in journal if first >= since)
    budget.ids = max(end, since)
    return True
