"""Sample statuses and the buffer rotation rules, as one pure function.

Both stores (:class:`~kestrel_core.InMemoryStore` and the Ray store of kestrel-ray) call
:func:`rotate` after every append, so their lifecycles cannot drift apart.
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["Status", "rotate", "LIVE", "TRAINABLE"]


class Status(enum.IntEnum):
    """Lifecycle of a sample, stored as ``int8``.

    VALIDATION → TRAINING → DISFAVOURED → TOMBSTONE → DELETED. Only VALIDATION, TRAINING and
    DISFAVOURED samples are readable; TOMBSTONE samples are dead but may still be held by a
    checkout; DELETED samples have had their data released.
    """

    VALIDATION = 0
    TRAINING = 1
    DISFAVOURED = 2
    TOMBSTONE = 3
    DELETED = 4


#: statuses whose data is readable
LIVE = (Status.VALIDATION, Status.TRAINING, Status.DISFAVOURED)
#: statuses a training loader reads
TRAINABLE = (Status.TRAINING, Status.DISFAVOURED)


def rotate(
    status: np.ndarray, *, min_samples: int, max_samples: int, validation_samples: int
) -> np.ndarray:
    """Apply the buffer rules after an append; "oldest" means lowest sample id.

    1. Validation keeps the newest ``validation_samples``; older VALIDATION becomes TRAINING
       (``validation_samples = 0`` promotes every VALIDATION sample).
    2. DISFAVOURED samples survive only to keep TRAINING + DISFAVOURED at ``min_samples``:
       with ``keep = max(0, min_samples - #TRAINING)`` the oldest ``#DISFAVOURED - keep``
       become TOMBSTONE.
    3. TRAINING is capped at ``max_samples``; the oldest excess becomes TOMBSTONE.

    Args:
        status: int8 array, shape ``(M,)``, indexed by sample id; not modified.
        min_samples, max_samples, validation_samples: the ``buffer`` config values (≥ 0).

    Returns:
        A new int8 array of shape ``(M,)``.

    Example:
        >>> s = np.zeros(6, np.int8)          # six new VALIDATION samples
        >>> rotate(s, min_samples=4, max_samples=6, validation_samples=2).tolist()
        [1, 1, 1, 1, 0, 0]
    """
    out = np.array(status, dtype=np.int8, copy=True)
    val = np.flatnonzero(out == Status.VALIDATION)
    excess = len(val) - validation_samples
    if excess > 0:
        out[val[:excess]] = Status.TRAINING
    n_train = int(np.count_nonzero(out == Status.TRAINING))
    keep = max(0, min_samples - n_train)
    dis = np.flatnonzero(out == Status.DISFAVOURED)
    drop = len(dis) - keep
    if drop > 0:
        out[dis[:drop]] = Status.TOMBSTONE
    train = np.flatnonzero(out == Status.TRAINING)
    excess = len(train) - max_samples
    if excess > 0:
        out[train[:excess]] = Status.TOMBSTONE
    return out
