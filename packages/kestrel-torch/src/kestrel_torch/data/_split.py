"""A fixed validation slice of every round: rows split train/validation by their ids and a seed.

The store's own rule (``buffer.validation_samples``) keeps the *newest* rows for validation. In
a sequential run those come from the latest proposal — the best model's own — so the best model
is judged on rows it chose and can entrench itself (issue 11: example 05 kept an epoch-16 model
for 60 epochs). With an estimator's ``validation_fraction`` > 0 the split is instead a fixed
function of each row's id and a seed (:func:`validation_mask`): every append (every round) gives
about that fraction of its rows to validation, a row never changes sides, and the validation set
is the union of those slices over all rounds, on which every model is compared. The store's
statuses then only say which rows are alive; both loaders read every live row and keep their
side (:class:`SplitView`).

Rows the store evicts (``buffer.max_samples``) leave either side; nothing is ever re-split.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kestrel_core import BufferView, Fetch, Status

__all__ = ["LIVE", "SplitView", "validation_mask"]

#: every live status: with a split, both loaders read all of them and keep their side
LIVE = (Status.VALIDATION, Status.TRAINING, Status.DISFAVOURED)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def validation_mask(ids: np.ndarray | Sequence[int], fraction: float, seed: int) -> np.ndarray:
    """Which rows validate: row ``id`` does iff ``u(id, seed) < fraction``.

    ``u`` is uniform on [0, 1): the top 53 bits of splitmix64's finaliser applied to
    ``id + (seed + 1) · 0x9E3779B97F4A7C15`` (mod 2⁶⁴), over 2⁵³. It depends on the row's id
    and the seed alone — not on the order or the batch the ids arrive in, the machine or the
    time — so each append's rows split the same way on every machine and on every call, and a
    row never changes sides. Another seed gives an independent split (an ensemble's members).

    Args:
        ids: sample ids (non-negative integers), any shape.
        fraction: the share of rows that validate, in [0, 1].
        seed: the split's seed (a non-negative integer; an estimator uses its ``seed`` option,
            else the run's seed, else 0).

    Returns:
        bool array of ``ids``' shape.

    Raises:
        ValueError: ``fraction`` outside [0, 1] or a negative ``seed``.
    """
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"validation_mask(fraction={fraction!r}): expected a number in [0, 1]")
    if int(seed) < 0:
        raise ValueError(f"validation_mask(seed={seed!r}): expected an integer >= 0")
    x = np.asarray(ids, dtype=np.int64).astype(np.uint64)
    key = np.uint64((int(seed) + 1) * int(_GOLDEN) % 2**64)
    u = (_mix(x + key) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return u < float(fraction)


class SplitView:
    """A store view that shows one side of the id split (a :class:`kestrel_core.BufferView`).

    :meth:`fetch` reads the wrapped view and keeps the rows of its side: validation rows
    (``validation=True``) or training rows. The other side's ids are remembered and passed
    on as held, so each row is read at most once whatever the number of syncs. Meant for one
    loader (its fetches run one at a time on the loader's thread).

    Args:
        view: the view to read from (its :meth:`discard` and :meth:`stats` are passed on).
        fraction, seed: the rule (:func:`validation_mask`).
        validation: which side this view shows.
    """

    def __init__(self, view: BufferView, fraction: float, seed: int, *, validation: bool):
        validation_mask(np.empty(0, np.int64), fraction, seed)  # checks the arguments
        self._view = view
        self.fraction, self.seed, self.validation = float(fraction), int(seed), bool(validation)
        self._other = np.empty(0, dtype=np.int64)  # ids of the other side the store holds

    def side(self, ids: np.ndarray) -> np.ndarray:
        """bool mask: which of ``ids`` are on this view's side."""
        return validation_mask(ids, self.fraction, self.seed) == self.validation

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
        """The wrapped view's fetch, restricted to this side (active ids, new ids and rows).

        ``max_samples`` caps this side's rows: the other side's held ids are added to it, so the
        store's random subset is drawn among rows neither side holds yet (about ``max_samples``
        rows of this side, not exactly)."""
        held = np.asarray(held_ids if held_ids is not None else (), dtype=np.int64).reshape(-1)
        other = self._other
        cap = int(max_samples) + other.size if max_samples else 0
        fetched = self._view.fetch(
            statuses, keys, max_samples=cap, held_ids=np.concatenate([held, other])
        )
        active = np.asarray(fetched.active_ids, dtype=np.int64).reshape(-1)
        new_ids = np.asarray(fetched.new_ids, dtype=np.int64).reshape(-1)
        keep = self.side(new_ids)
        active_keep = self.side(active)
        # remember the other side's rows the store still holds, and the ones that just arrived
        self._other = np.union1d(np.intersect1d(other, active), new_ids[~keep])
        arrays = {key: np.asarray(a)[keep] for key, a in fetched.arrays.items()}
        return Fetch(active[active_keep], new_ids[keep], arrays)

    def stats(self) -> dict[str, int]:
        """The wrapped view's ``stats`` (the store's counts by status)."""
        return self._view.stats()

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        """The wrapped view's ``discard``."""
        self._view.discard(ids)
