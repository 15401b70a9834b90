"""The sample store actor: block refs, statuses and pins; never the data itself.

``SampleStore`` is a plain class; :func:`create_store` applies ``ray.remote`` (``num_cpus=0``:
the store only does bookkeeping). It is a synchronous actor, so its methods run one at a time
and need no locks.

Each append brings one *block*: ``{flat_key: ObjectRef}`` whose objects hold ``n`` rows
``(n, *D_key)``. The dict nesting keeps Ray from resolving the refs: the store only holds them
(as a borrower; the driver that called the simulator owns the objects). Dropping a block's
dict once all its rows are dead and unpinned is what lets Ray free the objects
(``ray.internal.free`` no longer exists).

The one exception to "never touches data" is the snapshot: every ``snapshot_every``-th appended
sample is written to ``<snapshot_dir>/<sample id:06d>.npz``, which needs a ``ray.get`` of that
block inside the store. With ``snapshot_every=0`` (the default) the store never reads data.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray
from kestrel_core import (
    BlockIndex,
    BlockRead,
    Checkout,
    ConfigError,
    KestrelError,
    StoreError,
    StoreWarning,
    check_count,
    split_key,
)


__all__ = ["SampleStore", "create_store", "appended", "Schema"]

#: flat key → (per-sample shape, dtype string)
Schema = dict[str, tuple[tuple[int, ...], str]]


class SampleStore:
    """Ray actor class holding a run's training buffer as block refs.

    Shape symbols: n rows of a block, D_key the per-sample shape of a flat key, M sample ids.

    Args:
        min_samples, max_samples, validation_samples: buffer rules (see :func:`kestrel_core.rotate`).
        snapshot_every: save every N-th appended sample (0 = never).
        snapshot_dir: directory of the snapshots (created on first use); required when
            ``snapshot_every > 0``.
        seed: seed of the random subsets of ``checkout(max_samples=…)``.

    Raises:
        ConfigError: a rule value is not a count (``max_samples`` ≥ 1), or snapshots are asked
            for without a directory.
    """

    def __init__(self, *, min_samples: int = 0, max_samples: int = 2**62, validation_samples: int = 0,
                 snapshot_every: int = 0, snapshot_dir: str | None = None, seed: int | None = None):
        self._index = BlockIndex(min_samples=min_samples, max_samples=max_samples,
                                 validation_samples=validation_samples, seed=seed)
        self._snapshot_every = check_count(snapshot_every or 0, "snapshot_every")
        if self._snapshot_every and snapshot_dir is None:
            raise ConfigError(f"buffer.snapshot_every={snapshot_every} needs a snapshot directory")
        self._snapshot_dir = None if snapshot_dir is None else os.fspath(snapshot_dir)
        self._schema: Schema | None = None

    def ready(self) -> bool:
        """Return ``True`` once the actor is constructed (used to wait for it)."""
        return True

    # -- append ----------------------------------------------------------------------------
    def append(self, block: Mapping[str, Any], n: int, shapes: Mapping[str, Sequence]) -> np.ndarray:
        """Append one block of ``n`` rows (the :class:`kestrel_core.SampleStore` method).

        Args:
            block: ``{flat_key: ObjectRef}``; each object an array ``(n, *D_key)``.
            n: number of rows (≥ 0; 0 stores nothing).
            shapes: ``{flat_key: ((n, *D_key), dtype)}`` of the block's arrays, from the
                NodeWrapper that made them (the store never looks at the data).

        Returns:
            int64 ``(n,)``: the new sample ids.

        Raises:
            StoreError: a key is malformed, missing or extra; a leading dimension is not ``n``; a
                per-sample shape or dtype kind differs from the run's schema (fixed by the first
                non-empty append); a value is not an ObjectRef. Nothing is stored then.

        Warns:
            StoreWarning: (in the actor's log) more samples than ``max_samples +
                validation_samples`` at once; :meth:`append_blocks` returns the text instead.
        """
        ids, notes = self.append_blocks([(block, n, shapes)])
        for note in notes:
            warnings.warn(note, StoreWarning, stacklevel=2)
        return ids

    def append_blocks(self, blocks: Sequence[tuple[Mapping[str, Any], int, Mapping[str, Sequence]]]
                      ) -> tuple[np.ndarray, list[str]]:
        """Append several ``(block, n, shapes)`` in order; the rules run after each block.

        Returns:
            ``(ids, warnings)``: int64 ids of all blocks in order, and warning texts for the
            caller to re-issue where a user sees them.

        Raises:
            StoreError: as :meth:`append` for any block; nothing of the call is stored then.
        """
        checked = []
        schema = self._schema
        for block, n, shapes in blocks:
            n = check_count(n)
            meta = self._validated(block, n, shapes, schema)
            if schema is None and n:
                schema = {k: (shape[1:], dtype) for k, (shape, dtype) in meta.items()}
            checked.append((dict(block), n))
        total = sum(n for _, n in checked)
        notes = []
        rules = self._index.rules
        if total > rules["max_samples"] + rules["validation_samples"]:
            notes.append(f"{total} samples appended but max_samples is {rules['max_samples']} "
                         f"(validation_samples {rules['validation_samples']}): the oldest "
                         f"{total - rules['max_samples'] - rules['validation_samples']} become "
                         "TOMBSTONE at once")
        self._schema = schema
        out = [np.zeros(0, np.int64)]
        for block, n in checked:
            ids = self._index.append(block, n)
            out.append(ids)
            if self._snapshot_every and n:
                self._snapshot(block, ids)
        return np.concatenate(out), notes

    def _validated(self, block: Mapping[str, Any], n: int, shapes: Mapping[str, Sequence],
                   schema: Schema | None) -> Schema:
        if not isinstance(block, Mapping) or not block:
            raise StoreError(f"append: expected a non-empty mapping flat key → ObjectRef, got "
                             f"{type(block).__name__}")
        if set(block) != set(shapes):
            raise StoreError(f"append: block keys {sorted(block)} differ from the keys of its shapes "
                             f"{sorted(shapes)}")
        meta: Schema = {}
        for key, ref in block.items():
            try:
                split_key(key)
            except (KestrelError, AttributeError, TypeError) as err:
                raise StoreError(f"append: key {key!r} is not a flat key '<node>.<field>'") from err
            if not isinstance(ref, ray.ObjectRef):
                raise StoreError(f"append: key {key!r}: the Ray store holds ObjectRefs, got "
                                 f"{type(ref).__name__}")
            shape, dtype = tuple(int(d) for d in shapes[key][0]), np.dtype(shapes[key][1])
            if not shape or shape[0] != n:
                raise StoreError(f"append: key {key!r} has shape {shape}; expected leading dimension {n}")
            if dtype.kind not in "biufc":
                raise StoreError(f"append: key {key!r} has non-numeric dtype {dtype}")
            meta[key] = (shape, dtype.name)
        if schema is not None:
            missing, extra = sorted(set(schema) - set(meta)), sorted(set(meta) - set(schema))
            if missing or extra:
                raise StoreError(
                    f"append: block keys do not match the store's schema (fixed by the first append, "
                    f"sample 0): missing {missing}, extra {extra}; the store holds {sorted(schema)}")
            for key, (shape, dtype) in meta.items():
                want, want_dtype = schema[key]
                if shape[1:] != want:
                    raise StoreError(f"append: key {key!r} has per-sample shape {shape[1:]}; the "
                                     f"store's schema (fixed by the first append) has {want}")
                if np.dtype(dtype).kind != np.dtype(want_dtype).kind:
                    raise StoreError(f"append: key {key!r} has dtype {dtype}; the store's schema "
                                     f"has {want_dtype}")
        return meta

    def _snapshot(self, block: Mapping[str, Any], ids: np.ndarray) -> None:
        rows = np.flatnonzero((ids + 1) % self._snapshot_every == 0)
        if not rows.size:
            return
        keys = sorted(block)
        arrays = ray.get([block[k] for k in keys])  # the store's only data read (see module doc)
        os.makedirs(self._snapshot_dir, exist_ok=True)
        for r in rows.tolist():
            path = os.path.join(self._snapshot_dir, f"{int(ids[r]):06d}.npz")
            np.savez(path, **{k: np.asarray(a[r]) for k, a in zip(keys, arrays)})

    # -- read ------------------------------------------------------------------------------
    def checkout(self, statuses: Sequence[int], keys: Sequence[str], max_samples: int = 0,
                 held_ids: np.ndarray | None = None) -> Checkout:
        """Pin and return the blocks of the active ids the caller does not hold.

        Returns:
            A :class:`kestrel_core.Checkout` whose ``reads[i].block`` is ``{key: ObjectRef}`` for
            the requested ``keys``; pinned until :meth:`release` of its ``token``.

        Raises:
            StoreError: a key is not in the schema (the message lists the known keys), or a status
                is not readable.
        """
        keys = [str(k) for k in keys]
        if self._schema is not None:
            unknown = [k for k in keys if k not in self._schema]
            if unknown:
                raise StoreError(f"checkout: unknown key(s) {unknown}; the store holds "
                                 f"{sorted(self._schema)}")
        token, active, new, reads = self._index.checkout(statuses, max_samples=max_samples,
                                                         held_ids=held_ids)
        return Checkout(token=token, active_ids=active, new_ids=new,
                        reads=[BlockRead(block={k: h[k] for k in keys}, rows=rows, ids=ids)
                               for h, rows, ids in reads])

    def release(self, token: int) -> None:
        """End checkout ``token``; dead blocks it pinned are dropped (Ray frees them).

        Raises:
            StoreError: the token is unknown or already released.
        """
        self._index.release(token)

    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED; returns how many moved.

        Raises:
            StoreError: an id was never assigned.
        """
        return self._index.discard(ids)

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """int8 statuses of ``ids``.

        Raises:
            StoreError: an id was never assigned.
        """
        return self._index.status(ids)

    def stats(self) -> dict[str, int]:
        """Counts ``validation training disfavoured tombstone deleted total blocks``."""
        return self._index.stats()

    def schema(self) -> Schema | None:
        """The run's key schema ``{flat_key: (D_key, dtype)}``, or ``None`` before the first append."""
        return None if self._schema is None else dict(self._schema)

    def held_refs(self) -> int:
        """Number of ObjectRefs the store holds (blocks × keys): what keeps objects alive."""
        return sum(len(h) for h in self._index.handles())

    def open_checkouts(self) -> int:
        """Number of checkouts not yet released."""
        return self._index.open_checkouts


def create_store(**kwargs: Any) -> Any:
    """Start a :class:`SampleStore` actor (``num_cpus=0``) and return its handle.

    Args:
        **kwargs: passed to :class:`SampleStore`.

    Raises:
        ConfigError: bad buffer values (checked here, before the actor starts).
    """
    SampleStore(**kwargs)  # validates the arguments here, where the error is readable
    handle = ray.remote(SampleStore).options(num_cpus=0).remote(**kwargs)
    ray.get(handle.ready.remote())
    return handle


def appended(ref: Any) -> tuple[np.ndarray, list[str]]:
    """Wait for a ``store.append_blocks`` call: its new sample ids and the store's notes.

    Args:
        ref: the ObjectRef ``append_blocks.remote(...)`` returned.

    Returns:
        ``(ids int64 (n,), notes)``; a note is a warning the caller should show (for example:
        more samples at once than the buffer holds).

    Raises:
        KestrelError: the one the store raised (a :class:`StoreError` for a schema break, K06),
            unwrapped from Ray's task error.
    """
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, KestrelError):
            raise cause from err
        raise
