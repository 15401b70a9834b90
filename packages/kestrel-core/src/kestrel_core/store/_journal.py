"""The buffer journal: every appended block on disk until a buffer snapshot holds it.

A launch writes its whole buffer (``buffer.npz``, :mod:`._buffer_file`) when it stops and at
every checkpoint; rows appended in between would die with the store or the driver. So after
each successful append the driver writes the rows of that append to the journal folder
(``RUN/buffer/journal/``) as one file, ``<first id>-<last id>.npz``, holding

* one array per flat key, shape ``(n, *D)`` — the rows in id order;
* ``_ids`` int64 ``(n,)`` (``first … last``, contiguous: one append's ids are);
* ``_valid`` bool ``(n,)`` — rows appended as invalid (non-finite, raised) are ``False``;
* ``_sizes`` int64 ``(b,)`` — the rows of each block of the append (its chunks), so a replay
  appends the same blocks and the buffer rules run as they ran.

Files are written atomically and durably (``kestrel_core.files._npz.save_npz(durable=True)``) without
pickle. Once a snapshot is in place, :func:`trim_journal` deletes the files it covers (every id
below the snapshot's id count): the journal holds only what the snapshot lacks. A resumed launch
puts the snapshot back, then appends the journal's files in id order (:func:`journal_files`,
:func:`read_journal_file`). A file that cannot be read — a ``.tmp`` left by a process killed
while writing, a truncated or foreign file — is reported, never deleted.

Shape symbols: n rows of one append, b blocks of it, D a key's per-sample shape.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kestrel_core._errors import StoreError
from kestrel_core.files._npz import fsync_dir, save_npz

__all__ = [
    "JOURNAL_DIR",
    "JournalFile",
    "JournalBlock",
    "journal_name",
    "write_journal",
    "journal_files",
    "read_journal_file",
    "trim_journal",
]

#: the journal's folder inside the run's buffer folder
JOURNAL_DIR = "journal"
_IDS, _VALID, _SIZES = "_ids", "_valid", "_sizes"
_NAME = re.compile(r"^(\d+)-(\d+)\.npz$")
_TMP = re.compile(r"^(\d+)-(\d+)\.npz\.tmp$")


@dataclass(frozen=True)
class JournalFile:
    """One file of the journal folder, by its name.

    Attributes:
        first, last: the ids its name gives (``last ≥ first``).
        path: the file. complete: ``False`` for a ``.tmp`` (a write that never finished).
    """

    first: int
    last: int
    path: str
    complete: bool = True


@dataclass(frozen=True)
class JournalBlock:
    """The rows of one append, read back from the journal.

    Attributes:
        ids: int64 ``(n,)``, contiguous ascending.
        arrays: flat key → ``(n, *D)``.
        valid: bool ``(n,)`` (``False``: appended invalid).
        sizes: int64 ``(b,)``, the rows of each block of the append (sum ``n``).
        path: the file read.
    """

    ids: np.ndarray
    arrays: dict[str, np.ndarray]
    valid: np.ndarray
    sizes: np.ndarray
    path: str

    @property
    def n(self) -> int:
        """Rows."""
        return len(self.ids)

    @property
    def invalid(self) -> int:
        """Rows appended invalid."""
        return int(np.count_nonzero(~self.valid))

    def blocks(self) -> list[tuple[dict[str, np.ndarray], np.ndarray | None]]:
        """The append's blocks in order: ``(arrays (s, *D) by key, valid (s,) or None)``;
        ``None`` where every row of the block is valid (as the block was appended)."""
        out: list[tuple[dict[str, np.ndarray], np.ndarray | None]] = []
        start = 0
        for size in self.sizes.tolist():
            part = slice(start, start + int(size))
            valid = self.valid[part]
            out.append(
                ({k: a[part] for k, a in self.arrays.items()}, None if valid.all() else valid)
            )
            start += int(size)
        return out


def journal_name(first: int, last: int) -> str:
    """The file name of ids ``first … last``: ``"<first>-<last>.npz"``."""
    return f"{int(first)}-{int(last)}.npz"


def write_journal(
    directory: str | os.PathLike[str],
    ids: np.ndarray,
    arrays: Mapping[str, np.ndarray],
    valid: np.ndarray | None = None,
    sizes: Sequence[int] | None = None,
) -> str:
    """Write the rows of one append to ``<directory>/<first>-<last>.npz``, durably.

    Written to ``<name>.tmp``, fsynced, renamed, the folder fsynced: the file is whole or absent.

    Args:
        directory: the journal folder (created).
        ids: int64 ``(n,)``, contiguous ascending, n ≥ 1.
        arrays: flat key → ``(n, *D)`` (numeric; no object arrays).
        valid: bool ``(n,)``; ``None``: every row valid.
        sizes: rows per block of the append (sum n); ``None``: one block.

    Returns:
        The path written.

    Raises:
        StoreError: no rows, ids not contiguous, or an array, ``valid`` or ``sizes`` that does
            not match the n ids (naming the key).
        OSError: the file cannot be written.
    """
    ids = np.asarray(ids, dtype=np.int64).ravel()
    n = len(ids)
    if n == 0 or not np.array_equal(ids, np.arange(ids[0], ids[0] + n)):
        raise StoreError(f"journal: ids must be contiguous and non-empty, got {ids[:5].tolist()}…")
    mask = np.ones(n, bool) if valid is None else np.asarray(valid, dtype=bool).ravel()
    cuts = np.asarray([n] if sizes is None else list(sizes), dtype=np.int64)
    if mask.shape != (n,) or cuts.sum() != n or (cuts < 0).any():
        raise StoreError(f"journal: valid {mask.shape} or sizes {cuts.tolist()} do not fit {n} ids")
    for key, value in arrays.items():
        if key in (_IDS, _VALID, _SIZES) or np.ndim(value) == 0 or np.shape(value)[0] != n:
            raise StoreError(f"journal: key {key!r} has shape {np.shape(value)}; expected {n} rows")
    path = os.path.join(os.fspath(directory), journal_name(ids[0], ids[-1]))
    return save_npz(path, {**arrays, _IDS: ids, _VALID: mask, _SIZES: cuts}, durable=True)


def journal_files(directory: str | os.PathLike[str]) -> list[JournalFile]:
    """The journal's files in id order (``.tmp`` ones included, ``complete=False``); others
    in the folder are left out. ``[]`` when the folder does not exist."""
    folder = os.fspath(directory)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _NAME.match(name) or _TMP.match(name)
        if m:
            out.append(
                JournalFile(
                    int(m.group(1)),
                    int(m.group(2)),
                    os.path.join(folder, name),
                    complete=not name.endswith(".tmp"),
                )
            )
    return sorted(out, key=lambda f: (f.first, f.last, not f.complete))


def read_journal_file(file: JournalFile) -> JournalBlock:
    """Read one journal file (no pickle) and check it against its name.

    Raises:
        StoreError: the file is a ``.tmp``, cannot be read, or does not hold the rows its name
            says (the message names the file and what is wrong).
    """
    if not file.complete:
        raise StoreError(f"{file.path}: a journal write that never finished (no rename)")
    try:
        with open(file.path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise StoreError(f"{file.path}: cannot read journal file: {err}") from err
    missing = [k for k in (_IDS, _VALID, _SIZES) if k not in arrays]
    if missing:
        raise StoreError(f"{file.path}: not a journal file (no {missing[0]!r})")
    ids = arrays.pop(_IDS).astype(np.int64).ravel()
    valid = arrays.pop(_VALID).astype(bool).ravel()
    sizes = arrays.pop(_SIZES).astype(np.int64).ravel()
    n = file.last - file.first + 1
    if not np.array_equal(ids, np.arange(file.first, file.last + 1)):
        raise StoreError(f"{file.path}: its ids are not {file.first}…{file.last}")
    if valid.shape != (n,) or sizes.sum() != n or (sizes < 0).any() or not arrays:
        raise StoreError(f"{file.path}: valid, sizes or keys do not fit its {n} ids")
    for key, value in arrays.items():
        if value.ndim == 0 or value.shape[0] != n:
            raise StoreError(f"{file.path}: key {key!r} has shape {value.shape}; expected {n} rows")
    return JournalBlock(ids, arrays, valid, sizes, file.path)


def trim_journal(directory: str | os.PathLike[str], next_id: int) -> list[str]:
    """Delete the journal files a snapshot covers: those whose ids are all below ``next_id``
    (the snapshot's id count; a row below it is in the snapshot, or was dead when it was taken).

    ``.tmp`` files below ``next_id`` go too (unfinished writes of rows the snapshot holds).

    Returns:
        The paths deleted.

    Raises:
        OSError: a file cannot be deleted.
    """
    gone = []
    for file in journal_files(directory):
        if file.last < int(next_id):
            try:
                os.remove(file.path)
            except FileNotFoundError:
                continue
            gone.append(file.path)
    if gone:
        fsync_dir(os.fspath(directory))
    return gone
