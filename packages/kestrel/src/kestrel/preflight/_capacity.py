"""Does the training buffer fit in Ray's object store? Checked when a launch starts.

The store keeps at most ``max(max_samples, min_samples) + validation_samples`` samples alive
(:func:`kestrel_core.rotate`), each as one row of every node's ``value`` (and a prior's or
estimator's ``log_prob``) in Ray's object store. The bytes of one sample come from the dry run
(:func:`kestrel.preflight._dryrun.dry_run`, before Ray starts); the store's capacity from
``ray.cluster_resources()["object_store_memory"]`` once Ray runs. A buffer larger than the
store stops the launch before any actor starts, naming both sizes::

    buffer: max_samples 100000 + validation_samples 16 samples × 1 MiB per sample = 97.7 GiB;
    Ray's object store holds 200 MiB (ray.cluster_resources()['object_store_memory']) …

rather than after minutes of simulation, as Ray's spilling to disk slows to a crawl or its
``ObjectStoreFullError`` — unless the buffer trains from disk (:func:`trains_from_disk`:
``buffer.storage: disk``, or ``auto`` with the journal on): then the launch logs that the object
store keeps the newest ``buffer.cache_samples`` rows (default half the store) and the loader
reads the others from ``RUN/buffer/journal`` (:mod:`kestrel_core.store._disk`), and
:func:`check_journal_space` checks that disk instead.

A buffer that fits can still make Ray spill: the store frees a block (one append's rows) only
once every row of it is dead, so up to ``simulate_count - 1`` dead rows stay with the live ones,
and the next round (``simulate_count`` rows) is created before the append frees anything. When
``(live + 2 × simulate_count) × bytes per sample`` passes :data:`TIGHT` of the store, a warning
says so (Ray then spills to disk, bounded but slow); the measured case is in RELIABILITY.md.

Nodes the dry run did not check (``dry_run: false`` and their descendants) are not counted; the
log line says so.

The same bytes size the run's disk (:func:`check_disk_space`, before a launch writes
anything): a checkpoint writes the whole buffer (``buffer.npz``, beside the old one until the
rename) and the estimators' weights. Less free space than that is a warning naming the folder,
the need and the free space; less than the initial simulation's rows (the first snapshot
could never be written) refuses the launch.

Shape symbols: n the dry run's draws.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from kestrel_core import BufferConfig, ConfigError, RunConfig
from kestrel_core.internal import ESTIMATOR_FILE, DiskFullError, free_bytes
from kestrel_core.store import CACHE_SHARE, JOURNAL_DIR


class _RunFolder(Protocol):
    @property
    def root(self) -> str: ...
    @property
    def snapshots(self) -> str: ...
    @property
    def journal(self) -> str: ...
    def node_dir(self, node: str) -> str: ...


class CheckedLaunch(Protocol):
    """What :func:`check_run_disk` reads of a launch (its
    :class:`~kestrel.session._session.RunSession`, which checks capacity with this module)."""

    @property
    def config(self) -> RunConfig: ...
    @property
    def run(self) -> _RunFolder: ...
    @property
    def notes(self) -> list[str]: ...
    @property
    def sample_bytes(self) -> dict[str, int]: ...


__all__ = [
    "bytes_per_sample",
    "buffer_capacity",
    "check_capacity",
    "rounds_in_flight",
    "store_capacity",
    "size_text",
    "check_disk_space",
    "check_run_disk",
    "trains_from_disk",
    "cache_rows",
    "storage_of",
]

#: a warning when the buffer's blocks and a round in flight may take more than this share
TIGHT = 0.9
#: bytes counted for one estimator's weights before any were saved (a resume counts the files)
WEIGHTS_GUESS = 4 * 2**20
#: bytes counted for the small files (status, logs, metrics, budget) beside a checkpoint
SMALL_FILES = 1 * 2**20


def bytes_per_sample(outputs: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, int]:
    """Bytes one sample takes in the object store, per node.

    Args:
        outputs: the dry run's ``{node: {field: (n, …) array}}`` (``value``, ``log_prob``).

    Returns:
        node → bytes per sample (the node's fields together, rounded up).
    """
    out = {}
    for node, fields in outputs.items():
        arrays = [np.asarray(a) for a in fields.values()]
        n = max((a.shape[0] for a in arrays if a.ndim), default=1)
        out[node] = -(-sum(a.nbytes for a in arrays) // max(n, 1))
    return out


def buffer_capacity(buffer: BufferConfig) -> int:
    """The most samples the store keeps alive: ``max(max_samples, min_samples) +
    validation_samples`` of a :class:`kestrel_core.BufferConfig`."""
    return max(int(buffer.max_samples), int(buffer.min_samples)) + int(buffer.validation_samples)


def store_capacity() -> float | None:
    """Bytes of the running Ray's object store (summed over its nodes), or ``None`` if unknown."""
    import ray

    value = ray.cluster_resources().get("object_store_memory")
    return float(value) if value else None


def size_text(nbytes: float) -> str:
    """``nbytes`` in binary units: ``"512 B"``, ``"1 MiB"``, ``"97.7 GiB"``."""
    value, units = float(nbytes), ("B", "KiB", "MiB", "GiB", "TiB")
    unit = 0
    while abs(value) >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.3g} {units[unit]}"


def check_capacity(
    buffer: BufferConfig,
    per_sample: Mapping[str, int],
    capacity: float | None,
    *,
    unchecked: Sequence[str] = (),
    log: logging.Logger | None = None,
) -> int:
    """Refuse a buffer that cannot fit in the object store (unless it trains from disk: then
    log so); log how much of it it takes.

    Args:
        buffer: the run's :class:`kestrel_core.BufferConfig` (``min_samples``,
            ``max_samples``, ``validation_samples``, ``simulate_count``).
        per_sample: node → bytes per sample (:func:`bytes_per_sample`).
        capacity: the object store's bytes (:func:`store_capacity`); ``None``: not checked.
        unchecked: nodes the dry run did not check (their bytes are unknown, not counted).
        log: where the sizes are noted (an info line; a warning when the buffer's blocks and a
            round in flight may take more than :data:`TIGHT` of the store).

    Returns:
        The buffer's bytes (``buffer_capacity(buffer) × sum(per_sample)``).

    Raises:
        ConfigError: the buffer alone needs more bytes than the store has and does not train
            from disk (``buffer.storage: memory``, or ``buffer.journal: false``); the message
            names the counts, the bytes per sample, both totals and the remedies.
    """
    sample = int(sum(per_sample.values()))
    keep = buffer_capacity(buffer)
    need = keep * sample
    if capacity is None or sample == 0:
        return need
    counts = (
        f"max_samples {int(buffer.max_samples)}"
        + (
            f" (min_samples {int(buffer.min_samples)})"
            if int(buffer.min_samples) > int(buffer.max_samples)
            else ""
        )
        + f" + validation_samples {int(buffer.validation_samples)}"
    )
    store = f"Ray's object store holds {size_text(capacity)}"
    if trains_from_disk(buffer, per_sample, capacity):
        if log is not None:
            cache = cache_rows(buffer, sample, capacity)
            log.info(
                "buffer: %d samples × %s = %s; Ray's object store holds %s: the buffer trains "
                "from disk (buffer.storage: %s): the object store keeps the newest %d samples "
                "(%s), the loader reads the others from RUN/buffer/journal",
                keep,
                size_text(sample),
                size_text(need),
                size_text(capacity),
                storage_of(buffer),
                cache,
                size_text(cache * sample),
            )
        return need
    if need > capacity:
        fits = max(0, int(capacity // sample) - int(buffer.validation_samples))
        raise ConfigError(
            f"buffer: {counts} samples × {size_text(sample)} per sample = {size_text(need)}; "
            f"{store} (ray.cluster_resources()['object_store_memory']), so the buffer cannot "
            f"fit: lower buffer.max_samples to at most {fits}, give Ray a larger store "
            "(ray.object_store_memory in the config, or a larger cluster), or train from disk "
            + (
                "(buffer.storage: auto or disk)"
                if bool(getattr(buffer, "journal", True))
                else "(buffer.storage: auto or disk with buffer.journal: true; it is false)"
            )
        )
    if log is not None:
        skipped = f"; not counted (not dry-run): {list(unchecked)}" if unchecked else ""
        log.info(
            "buffer: %d samples × %s = %s of the %s object store (%.0f %%)%s",
            keep,
            size_text(sample),
            size_text(need),
            size_text(capacity),
            100.0 * need / capacity,
            skipped,
        )
        round_bytes = _round_bytes(buffer, sample)
        peak = need + 2 * round_bytes
        if peak > TIGHT * capacity:
            log.warning(
                "buffer: its blocks and a round in flight may take %s (%.0f %%) of the %s "
                "object store (live %s + 2 rounds of %s); Ray spills to disk beyond it (slow): "
                "lower buffer.simulate_count or buffer.max_samples, or give Ray more "
                "ray.object_store_memory",
                size_text(peak),
                100.0 * peak / capacity,
                size_text(capacity),
                size_text(need),
                size_text(round_bytes),
            )
    return need


def storage_of(buffer: BufferConfig) -> str:
    """``buffer.storage`` (``"auto"`` for a buffer without one)."""
    return str(getattr(buffer, "storage", "auto") or "auto")


def trains_from_disk(
    buffer: BufferConfig, per_sample: Mapping[str, int], capacity: float | None
) -> bool:
    """Whether the buffer trains from disk: ``buffer.storage: disk``, or ``auto`` with the
    journal on and a buffer that would not fit in ``capacity`` bytes (the rule the store
    applies, :class:`kestrel_core.store.DiskPolicy`)."""
    storage = storage_of(buffer)
    if storage == "memory" or not bool(getattr(buffer, "journal", True)):
        return False
    if storage == "disk":
        return True
    sample = int(sum(per_sample.values()))
    return capacity is not None and sample > 0 and buffer_capacity(buffer) * sample > capacity


def cache_rows(buffer: BufferConfig, sample: int, capacity: float | None) -> int:
    """Rows a buffer that trains from disk keeps in the object store: ``buffer.cache_samples``,
    else :data:`~kestrel_core.store.CACHE_SHARE` of ``capacity`` (0 when unknown)."""
    cache = getattr(buffer, "cache_samples", None)
    if cache is not None:
        return int(cache)
    if not capacity or sample <= 0:
        return 0
    return int(CACHE_SHARE * capacity // sample)


def rounds_in_flight(
    buffer: BufferConfig, per_sample: Mapping[str, int], capacity: float | None
) -> int:
    """How many resimulation rounds may be in flight at once (:mod:`._rounds`): 2 — the next
    round's calls queue on the simulator replicas behind the current one's — when the buffer's
    blocks and three rounds' (two in flight, one being replaced) fit in :data:`TIGHT` of the
    object store; else 1, so a second round's blocks never make Ray spill. 2 when a size is
    unknown (``capacity`` ``None``, no bytes measured).

    Args:
        buffer: the run's :class:`kestrel_core.BufferConfig`. per_sample: node → bytes per
            sample (:func:`bytes_per_sample`). capacity: the object store's bytes.
    """
    sample = int(sum(per_sample.values()))
    if capacity is None or sample == 0:
        return 2
    fits = buffer_capacity(buffer) * sample + 3 * _round_bytes(buffer, sample) <= TIGHT * capacity
    return 2 if fits else 1


def _round_bytes(buffer: BufferConfig, sample: int) -> int:
    """Bytes of one resimulation round: ``simulate_count`` samples of ``sample`` bytes."""
    return int(getattr(buffer, "simulate_count", 0) or 0) * sample


def check_disk_space(
    folder: str,
    buffer: BufferConfig,
    per_sample: Mapping[str, int],
    *,
    weights: int = 0,
    free: int | None = None,
) -> str | None:
    """Whether the disk of ``folder`` (the run's buffer snapshots) has room for a checkpoint.

    A checkpoint needs ``(max(max_samples, min_samples) + validation_samples) × bytes per
    sample`` for ``buffer.npz`` (written beside the old one, renamed once complete), plus the
    estimators' weights and a little for the small files (:data:`SMALL_FILES`).

    Args:
        folder: where the snapshots go (need not exist: its nearest existing folder is asked).
        buffer: the run's :class:`kestrel_core.BufferConfig`.
        per_sample: node → bytes per sample (:func:`bytes_per_sample`, from the dry run).
        weights: bytes of the estimators' weights (the saved files on a resume, else a guess).
        free: bytes free there (default: :func:`shutil.disk_usage` of ``folder``).

    Returns:
        ``None`` when it fits (or nothing is known); else a one-line warning naming the folder,
        the need and the free space, and the remedies.

    Raises:
        DiskFullError: not even the initial simulation's rows (``min_samples +
            validation_samples``) fit: the first snapshot could never be written.
    """
    sample = int(sum(per_sample.values()))
    free = free_bytes(folder) if free is None else free
    if sample == 0 or free is None:
        return None
    first = (int(buffer.min_samples) + int(buffer.validation_samples)) * sample
    need = buffer_capacity(buffer) * sample + int(weights) + SMALL_FILES
    remedy = (
        "free space there, lower buffer.max_samples, or put the run (-o) or its buffer "
        "(paths.buffer) on a larger disk"
    )
    if free < first:
        raise DiskFullError(
            folder,
            free,
            need=first,
            remedy=f"the initial simulation's {int(buffer.min_samples)} + "
            f"{int(buffer.validation_samples)} samples × {size_text(sample)} per sample cannot "
            f"be saved: {remedy}",
        )
    if free >= need:
        return None
    return (
        f"disk: {folder} has {size_text(free)} free; a checkpoint needs about "
        f"{size_text(need)} ({buffer_capacity(buffer)} samples × {size_text(sample)} per sample "
        f"for buffer.npz, {size_text(int(weights))} for the weights, {size_text(SMALL_FILES)} "
        f"for the small files): the launch stops when the disk is full; {remedy}"
    )


def check_run_disk(session: CheckedLaunch) -> None:
    """:func:`check_disk_space` for a launch's :class:`~kestrel.session._session.RunSession`
    before it writes: a warning joins ``session.notes`` (logged, kept in ``run.json``). A buffer
    that trains from disk (:func:`trains_from_disk`) is checked by :func:`check_journal_space`
    too, and refused when ``paths.buffer`` moves its journal away from ``RUN/buffer/journal``
    (where the store reads it).

    The weights count the saved estimator files of a resumed run, else
    :data:`WEIGHTS_GUESS` per estimator node.

    Raises:
        DiskFullError: the run's disk cannot hold even the initial simulation's rows, or a
            buffer that trains from disk.
        ConfigError: a buffer that trains from disk with its journal moved by ``paths.buffer``.
    """
    buffer = session.config.buffer
    if buffer is None or not session.sample_bytes:
        return
    weights = 0
    for node in session.config.graph.latents:
        try:
            weights += os.path.getsize(os.path.join(session.run.node_dir(node), ESTIMATOR_FILE))
        except OSError:
            weights += WEIGHTS_GUESS
    note = check_disk_space(session.run.snapshots, buffer, session.sample_bytes, weights=weights)
    if note:
        session.notes.append(note)
    try:
        capacity = store_capacity()
    except Exception:  # Ray not running yet: the store's size is unknown
        capacity = None
    if trains_from_disk(buffer, session.sample_bytes, capacity):
        default = os.path.join(session.run.root, "buffer", JOURNAL_DIR)
        if os.path.abspath(session.run.journal) != os.path.abspath(default):
            raise ConfigError(
                f"buffer.storage: {storage_of(buffer)}: the buffer trains from the journal, "
                f"which the store reads at {default}, but paths.buffer puts it in "
                f"{session.run.journal}: remove paths.buffer, or set buffer.storage: memory "
                "(with a larger ray.object_store_memory)"
            )
        note = check_journal_space(session.run.journal, buffer, session.sample_bytes)
        if note:
            session.notes.append(note)


def check_journal_space(
    folder: str, buffer: BufferConfig, per_sample: Mapping[str, int], *, free: int | None = None
) -> str | None:
    """Whether the disk of the journal ``folder`` holds a buffer that trains from disk.

    Its rows live only there (beyond the object store's cache), so the disk needs the buffer's
    bytes for the journal (every row appended stays: the bank) beside the checkpoint's
    ``buffer.npz`` (:func:`check_disk_space`).

    Returns:
        ``None`` when twice the buffer's bytes are free (or nothing is known); else a one-line
        warning naming the folder, the need and the free space.

    Raises:
        DiskFullError: not even the buffer's rows fit: the training set could not live there.
    """
    sample = int(sum(per_sample.values()))
    free = free_bytes(folder) if free is None else free
    if sample == 0 or free is None:
        return None
    need = buffer_capacity(buffer) * sample
    remedy = (
        "free space there, lower buffer.max_samples, put the run (-o) on a larger disk, or "
        "keep the buffer in memory (buffer.storage: memory, with a larger object store)"
    )
    if free < need:
        raise DiskFullError(
            folder,
            free,
            need=need,
            remedy=f"the buffer trains from disk (buffer.storage): its "
            f"{buffer_capacity(buffer)} samples × {size_text(sample)} per sample live in the "
            f"journal: {remedy}",
        )
    if free >= 2 * need:
        return None
    return (
        f"disk: {folder} has {size_text(free)} free; the buffer trains from disk and needs "
        f"about {size_text(2 * need)} (its rows in the journal and in buffer.npz): the launch "
        f"stops when the disk is full; {remedy}"
    )
