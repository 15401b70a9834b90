"""What every part of the store contract uses: the rows it appends, the fixtures, helpers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from kestrel_core.store import BlockMeta, BlockRead, Checkout, Status

__all__ = ["ContractBase", "KEYS", "rows_for", "counts", "V", "T", "D", "X", "DEL"]

V, T, D, X, DEL = (
    Status.VALIDATION,
    Status.TRAINING,
    Status.DISFAVOURED,
    Status.TOMBSTONE,
    Status.DELETED,
)
#: the flat keys of the blocks the contract appends
KEYS = ("theta.value", "theta.log_prob", "x.value")


def rows_for(ids: np.ndarray | Sequence[int]) -> dict[str, np.ndarray]:
    """Arrays whose values encode the sample id, so any read can be checked.

    Returns:
        ``{"theta.value": float64 (n, 2), "theta.log_prob": float64 (n,), "x.value":
        float32 (n, 3)}`` for ``ids`` of shape ``(n,)``.
    """
    arr = np.asarray(ids, dtype=np.int64)
    return {
        "theta.value": np.stack([arr, -arr], axis=1).astype(np.float64),
        "theta.log_prob": arr * 0.5,
        "x.value": np.repeat(arr[:, None], 3, axis=1).astype(np.float32),
    }


def counts(store) -> tuple[int, int, int, int]:
    """(validation, training, disfavoured, dead = tombstone + deleted)."""
    s = store.stats()
    return s["validation"], s["training"], s["disfavoured"], s["tombstone"] + s["deleted"]


class ContractBase:
    """Abstract contract; subclasses supply ``make_store`` and ``make_block`` fixtures."""

    @pytest.fixture
    def make_store(self):
        raise NotImplementedError("subclass must provide the make_store fixture")

    @pytest.fixture
    def make_block(self):
        raise NotImplementedError("subclass must provide the make_block fixture")

    def read_rows(self, read: BlockRead, key: str) -> np.ndarray:
        """Rows ``read.rows`` of ``key`` in the block of a checkout."""
        return np.asarray(read.block[key])[read.rows]

    @contextlib.contextmanager
    def warns(self, match: str) -> Iterator[None]:
        """Expect the store to warn with a message matching ``match``."""
        with pytest.warns(UserWarning, match=match):
            yield

    # helpers ---------------------------------------------------------------------------------

    def put(self, store, make_block, arrays, n: int | None = None, valid=None) -> np.ndarray:
        """Append ``arrays`` as one block with the metadata read from them."""
        meta = BlockMeta.of(arrays, n, valid=valid)
        return np.asarray(store.append(make_block(arrays), meta))

    def append(self, store, make_block, n: int, keys=KEYS, valid=None) -> np.ndarray:
        start = store.stats()["total"]
        arrays = {k: v for k, v in rows_for(np.arange(start, start + n)).items() if k in keys}
        return self.put(store, make_block, arrays, n, valid)

    def read_all(self, checkout: Checkout, key: str) -> np.ndarray:
        parts = [self.read_rows(r, key) for r in checkout.reads]
        return np.concatenate(parts) if parts else np.empty((0,))
