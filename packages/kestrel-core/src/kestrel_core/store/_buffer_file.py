"""The whole buffer in one file: what a stopped launch saves and a resumed launch restores.

A launch that stops (completed, Ctrl-C, timeout) saves every readable row of its store —
VALIDATION, TRAINING, DISFAVOURED — with its sample id and status as
``<snapshot folder>/buffer.npz``; the next launch of the run puts them back into its new store
(:meth:`~._base.BlockStore.restore`) instead of simulating a buffer from the prior. The rows
keep their ids (ids are never reused across launches, and an estimator's count of the samples
it has seen stays right) and their statuses (the validation set is the same).

The file holds one array per flat key, shape ``(R, *D)``, and ``_ids`` (int64 ``(R,)``),
``_status`` (int8 ``(R,)``) and ``_next_id`` (int64, the store's id count). Names without a
dot never clash with a flat key.

Without ``buffer.npz`` (a launch that was killed) the per-sample snapshots of
``buffer.snapshot_every`` (``<id:06d>.npz``, :mod:`._snapshot`) are the fallback: those rows
come back as new rows (their statuses were not saved; the buffer rules assign them again).

Shape symbols: R rows saved, D a key's per-sample shape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kestrel_core._errors import StoreError
from kestrel_core.files._npz import save_npz
from kestrel_core.store._disk import resolve_on_disk
from kestrel_core.store._gather import read_checkout
from kestrel_core.store._lifecycle import LIVE, Status
from kestrel_core.store._meta import Schema
from kestrel_core.store._protocol import SampleStore

__all__ = [
    "BUFFER_FILE",
    "BufferSnapshot",
    "take_snapshot",
    "write_buffer_file",
    "read_buffer_file",
]

#: file name of the whole-buffer snapshot inside the snapshot folder
BUFFER_FILE = "buffer.npz"
_IDS, _STATUS, _NEXT = "_ids", "_status", "_next_id"
_SAMPLE_FILE = re.compile(r"^(\d{6,})\.npz$")


@dataclass(frozen=True)
class BufferSnapshot:
    """Rows of a buffer with their ids and statuses.

    Attributes:
        arrays: flat key → array ``(R, *D)``, row ``i`` holding sample ``ids[i]``.
        ids: int64 ``(R,)``, strictly ascending.
        statuses: int8 ``(R,)`` (VALIDATION, TRAINING, DISFAVOURED), or ``None`` (rows read
            from per-sample snapshots: they enter as new rows).
        next_id: the id count of the store the rows came from (the first id a later append
            may use).
        source: the file or folder the rows were read from ("" for a snapshot in memory).
    """

    arrays: dict[str, np.ndarray]
    ids: np.ndarray
    statuses: np.ndarray | None
    next_id: int
    source: str = ""

    @property
    def n(self) -> int:
        """R: the number of rows."""
        return len(self.ids)

    def counts(self) -> dict[str, int]:
        """Rows per status name (``{"rows": R}`` alone when the statuses are unknown)."""
        out = {"rows": self.n}
        if self.statuses is not None:
            for s in LIVE:
                out[s.name.lower()] = int(np.count_nonzero(self.statuses == s))
        return out

    def ids_with(self, status: Status) -> np.ndarray:
        """int64 ids of the rows with ``status`` (empty when the statuses are unknown)."""
        if self.statuses is None:
            return np.zeros(0, np.int64)
        return self.ids[self.statuses == status]


def take_snapshot(
    store: SampleStore,
    keys: Sequence[str],
    resolve: Callable[[list[Any]], list[Any]] = list,  # OnDisk values: read from the journal
    *,
    schema: Schema | None = None,
    max_bytes: int | None = None,
) -> BufferSnapshot:
    """Every readable row of ``store`` with its id and status.

    Call it while nothing appends (at the end of a launch): the rows are checked out once and
    their statuses asked right after.

    Args:
        store: any :class:`~kestrel_core.SampleStore` (an ``InMemoryStore``, kestrel-ray's
            ``StoreHandle``).
        keys: the flat keys to save (the store's schema).
        resolve: block values → arrays, in order (the identity in memory; one batched
            ``ray.get`` for Ray's refs).
        schema, max_bytes: resolve the blocks in groups of at most ``max_bytes`` (see
            :func:`~kestrel_core.store.read_checkout`); ``None``: all at once.

    Returns:
        A :class:`BufferSnapshot` (``source`` empty).

    Raises:
        StoreError: the store refused the checkout (an unknown key).
    """
    keys = [str(k) for k in keys]
    checkout = store.checkout([int(s) for s in LIVE], keys)
    try:
        arrays = read_checkout(
            checkout,
            keys,
            lambda values: resolve_on_disk(values, resolve),
            lambda key: ((), np.float64),
            schema=schema,
            max_bytes=max_bytes,
        )
        ids = np.asarray(checkout.new_ids, dtype=np.int64)
        statuses = np.asarray(store.status(ids), dtype=np.int8)
        total = int(store.stats().get("total", 0))
    finally:
        store.release(checkout.token)
    return BufferSnapshot(arrays, ids, statuses, max(total, int(ids[-1]) + 1 if len(ids) else 0))


def write_buffer_file(directory: str | os.PathLike[str], snapshot: BufferSnapshot) -> str:
    """Save ``snapshot`` as ``<directory>/buffer.npz`` (atomically and durably: fsynced, so a
    journal may be trimmed once it returns; the folder is created).

    Returns:
        The path written.

    Raises:
        OSError: the file cannot be written.
    """
    statuses = snapshot.statuses
    if statuses is None:
        statuses = np.full(snapshot.n, Status.VALIDATION, np.int8)
    arrays: dict[str, Any] = dict(snapshot.arrays)
    arrays.update(
        {
            _IDS: np.asarray(snapshot.ids, np.int64),
            _STATUS: np.asarray(statuses, np.int8),
            _NEXT: np.int64(snapshot.next_id),
        }
    )
    return save_npz(os.path.join(os.fspath(directory), BUFFER_FILE), arrays, durable=True)


def read_buffer_file(directory: str | os.PathLike[str]) -> BufferSnapshot | None:
    """The buffer saved under ``directory``: ``buffer.npz``, else the per-sample snapshots.

    Returns:
        A :class:`BufferSnapshot` whose ``source`` names the file or folder, or ``None`` when
        the folder holds neither (or does not exist).

    Raises:
        StoreError: a file cannot be read or is not a buffer snapshot (names the file).
    """
    folder = os.fspath(directory)
    path = os.path.join(folder, BUFFER_FILE)
    if os.path.isfile(path):
        data = _load(path)
        missing = [k for k in (_IDS, _STATUS, _NEXT) if k not in data]
        if missing:
            raise StoreError(f"{path}: not a buffer snapshot (no {missing[0]!r})")
        ids, statuses = data.pop(_IDS).astype(np.int64), data.pop(_STATUS).astype(np.int8)
        next_id = int(data.pop(_NEXT))
        _check_rows(path, data, len(ids))
        return BufferSnapshot(data, ids, statuses, next_id, path)
    if not os.path.isdir(folder):
        return None
    files = sorted((int(m.group(1)), f) for f in os.listdir(folder) if (m := _SAMPLE_FILE.match(f)))
    if not files:
        return None
    samples = [_load(os.path.join(folder, f)) for _, f in files]
    keys = sorted(samples[0])
    for (_, f), sample in zip(files, samples):
        if sorted(sample) != keys:
            raise StoreError(
                f"{os.path.join(folder, f)}: keys {sorted(sample)} differ from {keys} of "
                f"{files[0][1]}"
            )
    arrays = {k: np.stack([s[k] for s in samples]) for k in keys}
    ids = np.asarray([i for i, _ in files], np.int64)
    return BufferSnapshot(arrays, ids, None, int(ids[-1]) + 1, folder)


def _load(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError) as err:
        raise StoreError(f"cannot read buffer snapshot {path}: {err}") from err


def _check_rows(path: str, arrays: Mapping[str, np.ndarray], n: int) -> None:
    for key, value in arrays.items():
        if value.ndim == 0 or value.shape[0] != n:
            raise StoreError(
                f"{path}: key {key!r} has shape {value.shape}; expected {n} rows (one per id)"
            )
