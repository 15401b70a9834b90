"""Rows read back from the buffer journal by id: the training set beyond the object store.

A store whose buffer is larger than its share of memory (``buffer.storage: disk``, or ``auto``
for a buffer that would not fit) keeps only its newest blocks in memory (Ray's object store) and
drops the others once the journal holds them: such a block's value becomes an :class:`OnDisk`
marker per key, and every reader of a checkout (the loader's view, the end-of-launch snapshot)
turns the markers into arrays with :func:`resolve_on_disk` — rows of the journal files
``<journal>/<first>-<last>.npz`` (:mod:`._journal`), mapped, not read whole.

:class:`JournalReader` reads the journal by id range:

* the files are found by their names (``<first>-<last>.npz``), indexed once and again when an id
  lies beyond the index (a file the driver is still writing is waited for, up to ``wait``
  seconds);
* the journal is written uncompressed (``ZIP_STORED``), so each key's ``.npy`` member is mapped
  with :class:`numpy.memmap` at its offset in the zip: a read copies only the rows it asks for;
  a member that cannot be mapped is read whole (``numpy.load``);
* at most ``max_open`` files stay mapped (least recently used closed first);
* a file that cannot be read, or whose arrays do not hold the rows its name says, raises
  :class:`~kestrel_core.StoreError` naming the file; ids no file holds raise naming the ids and
  the folder.

Shape symbols: n rows of a block, K ids read, D a key's per-sample shape.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kestrel_core._errors import StoreError
from kestrel_core.store._journal import journal_files

__all__ = [
    "CACHE_SHARE",
    "JournalCover",
    "DiskPolicy",
    "OnDisk",
    "JournalReader",
    "journal_reader",
    "resolve_on_disk",
    "STORAGE_MODES",
]

#: the values of ``buffer.storage``
STORAGE_MODES = ("auto", "memory", "disk")
#: the share of the object store a buffer that trains from disk keeps in memory (default of
#: ``buffer.cache_samples``); the rest of the store is left to the rounds in flight
CACHE_SHARE = 0.5
_IDS = "_ids"
#: the local file header of a zip member: signature … name length, extra length
_LOCAL = struct.Struct("<IHHHHHIIIHH")


@dataclass(frozen=True)
class OnDisk:
    """One key of a block whose rows live only in the journal.

    Attributes:
        folder: the journal folder (``RUN/buffer/journal``).
        key: the flat key.
        first: the block's first id; its rows are ids ``first … first + n - 1``.
        n: rows of the block.
    """

    folder: str
    key: str
    first: int
    n: int


@dataclass(frozen=True)
class DiskPolicy:
    """When a store's buffer trains from disk, and how much of it stays in memory.

    Attributes:
        storage: ``buffer.storage``: ``"memory"`` (every row in memory), ``"disk"`` (rows
            beyond the cache live only in the journal), ``"auto"`` (disk only when the buffer
            would not fit in ``store_bytes``).
        folder: the journal folder (``RUN/buffer/journal``); ``None``: no journal, so memory.
        store_bytes: bytes of the memory the blocks live in (Ray's object store); ``None``:
            unknown (``auto`` is then memory).
        cache_samples: ``buffer.cache_samples``: rows kept in memory; ``None``:
            :data:`CACHE_SHARE` of ``store_bytes``.
    """

    storage: str = "auto"
    folder: str | None = None
    store_bytes: float | None = None
    cache_samples: int | None = None

    def cache_rows(self, keep_rows: int, row_bytes: int) -> int | None:
        """Rows the store keeps in memory for a buffer of ``keep_rows`` rows of ``row_bytes``
        bytes; ``None``: every row (the buffer is in memory)."""
        if self.storage == "memory" or self.folder is None or row_bytes <= 0:
            return None
        fits = self.store_bytes is None or keep_rows * row_bytes <= self.store_bytes
        if self.storage == "auto" and fits:
            return None
        if self.cache_samples is not None:
            return int(self.cache_samples)
        if self.store_bytes:
            return int(CACHE_SHARE * self.store_bytes // row_bytes)
        return 0


def on_disk_handle(folder: str) -> Callable[[Any, int, int], dict[str, OnDisk]]:
    """The spill of a block ``{key: value}`` of ids ``first …`` to ``{key: OnDisk}``."""

    def make(handle: Any, first: int, n: int) -> dict[str, OnDisk]:
        return {key: OnDisk(folder, key, int(first), int(n)) for key in handle}

    return make


def is_on_disk(handle: Any) -> bool:
    """Whether a block handle was handed to disk (its values are :class:`OnDisk`)."""
    if not isinstance(handle, dict) or not handle:
        return False
    return isinstance(next(iter(handle.values())), OnDisk)


class JournalCover:
    """Which ids a journal folder's complete files hold, listed again only when asked about
    ids beyond what the last listing saw (the folder only grows while a launch runs)."""

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def covers(self, folder: str, first: int, n: int) -> bool:
        """Whether one complete file of ``folder`` holds ids ``first … first + n - 1``."""
        last = int(first) + int(n) - 1
        if not self._lasts or last > self._lasts[-1]:
            files = [f for f in journal_files(folder) if f.complete]
            self._firsts = [f.first for f in files]
            self._lasts = [f.last for f in files]
        i = bisect.bisect_right(self._firsts, int(first)) - 1
        return i >= 0 and self._lasts[i] >= last


class _Mapped:
    """The arrays of one journal file, mapped (or read) key by key on first use."""

    def __init__(self, path: str, first: int, last: int):
        self.path, self.first, self.last = path, first, last
        self.arrays: dict[str, np.ndarray] = {}
        try:
            with zipfile.ZipFile(path) as zf:
                self.members = {info.filename[:-4]: info for info in zf.infolist()}
        except (OSError, zipfile.BadZipFile, ValueError) as err:
            raise StoreError(f"{path}: cannot read journal file: {err}") from err
        if _IDS not in self.members:
            raise StoreError(f"{path}: not a journal file (no {_IDS!r})")

    def array(self, key: str) -> np.ndarray:
        """The key's rows ``(n, *D)`` of the file (read-only; a memmap where possible).

        Raises:
            StoreError: the file lacks the key, cannot be read, or has the wrong row count.
        """
        got = self.arrays.get(key)
        if got is not None:
            return got
        info = self.members.get(key)
        if info is None:
            keys = sorted(k for k in self.members if not k.startswith("_"))
            raise StoreError(f"{self.path}: journal file has no key {key!r} (it holds {keys})")
        try:
            got = self._map(info) if info.compress_type == zipfile.ZIP_STORED else None
            if got is None:
                with np.load(self.path, allow_pickle=False) as data:
                    got = np.asarray(data[key])
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, struct.error) as err:
            raise StoreError(f"{self.path}: cannot read key {key!r}: {err}") from err
        n = self.last - self.first + 1
        if got.ndim == 0 or got.shape[0] != n:
            raise StoreError(
                f"{self.path}: key {key!r} has shape {got.shape}; its name says {n} rows"
            )
        self.arrays[key] = got
        return got

    def _map(self, info: zipfile.ZipInfo) -> np.ndarray | None:
        """The ``.npy`` member mapped at its offset; ``None`` when it cannot be mapped."""
        with open(self.path, "rb") as fh:
            fh.seek(info.header_offset)
            head = fh.read(_LOCAL.size)
            if len(head) < _LOCAL.size:
                raise ValueError("the file ends inside a member's header")
            fields = _LOCAL.unpack(head)
            if fields[0] != 0x04034B50:
                raise ValueError("a member's local header is damaged")
            fh.seek(info.header_offset + _LOCAL.size + fields[9] + fields[10])
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                return None
            offset = fh.tell()
        if dtype.hasobject or fortran:
            return None
        count = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset + count > os.path.getsize(self.path):
            raise ValueError(f"the file ends inside the array ({count} bytes at {offset})")
        if count == 0:
            return np.empty(shape, dtype)
        return np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape))


class JournalReader:
    """Rows of a journal folder by id; safe from any thread.

    Args:
        folder: the journal folder (``RUN/buffer/journal``).
        wait: seconds to wait for ids beyond the last file (a file the driver is writing);
            0: none.
        max_open: files kept mapped at once.

    Attributes:
        rows_read: rows read so far: each :meth:`block` call counts its rows (once per key
            asked), each :meth:`read` its ids (once for all its keys).
    """

    def __init__(self, folder: str | os.PathLike[str], *, wait: float = 0.0, max_open: int = 32):
        self.folder = os.fspath(folder)
        self.wait = float(wait)
        self.max_open = max(1, int(max_open))
        self.rows_read = 0
        self._lock = threading.Lock()
        self._firsts: list[int] = []
        self._files: list[tuple[int, int, str]] = []
        self._open: OrderedDict[str, _Mapped] = OrderedDict()

    # -- the index of files -----------------------------------------------------------------
    def _scan(self) -> None:
        files = [(f.first, f.last, f.path) for f in journal_files(self.folder) if f.complete]
        self._files = files
        self._firsts = [f[0] for f in files]

    def _file_of(self, id_: int) -> tuple[int, int, str] | None:
        i = bisect.bisect_right(self._firsts, id_) - 1
        if i >= 0 and self._files[i][0] <= id_ <= self._files[i][1]:
            return self._files[i]
        return None

    def _locate(self, id_: int) -> tuple[int, int, str]:
        """The file holding ``id_`` (rescanning, then waiting up to :attr:`wait` seconds)."""
        found = self._file_of(id_)
        if found is not None:
            return found
        deadline = time.monotonic() + self.wait
        while True:
            self._scan()
            found = self._file_of(id_)
            if found is not None:
                return found
            beyond = not self._files or id_ > self._files[-1][1]
            if not beyond or time.monotonic() >= deadline:
                raise StoreError(
                    f"journal {self.folder}: no file holds id {id_} (files cover "
                    f"{_cover(self._files)}): the rows live only on disk (buffer.storage) and "
                    "their journal file is missing or was not written — see the launch's log"
                )
            time.sleep(0.05)

    def _mapped(self, file: tuple[int, int, str]) -> _Mapped:
        got = self._open.get(file[2])
        if got is None:
            got = _Mapped(file[2], file[0], file[1])
            self._open[file[2]] = got
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(file[2])
        return got

    # -- reads ------------------------------------------------------------------------------
    def block(self, key: str, first: int, n: int) -> np.ndarray:
        """The rows of ids ``first … first + n - 1`` of ``key``: ``(n, *D)``, read-only (a
        mapped view when one file holds them all, else a copy).

        Raises:
            StoreError: no file holds an id, or a file is damaged (named).
        """
        first, n = int(first), int(n)
        parts = []
        with self._lock:
            id_, stop = first, first + n
            while id_ < stop:
                file = self._locate(id_)
                end = min(stop, file[1] + 1)
                parts.append(self._mapped(file).array(key)[id_ - file[0] : end - file[0]])
                id_ = end
            self.rows_read += n
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.empty((0,))

    def read(self, ids: Sequence[int] | np.ndarray, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """Rows of ``ids`` (any order, repeats allowed) for every key: fresh arrays ``(K, *D)``
        in the order of ``ids``.

        Raises:
            StoreError: no file holds an id (naming it and what the files cover), or a file is
                damaged (named).
        """
        ids = np.asarray(ids, dtype=np.int64).ravel()
        out: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {str(k): [] for k in keys}
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        with self._lock:
            pos = 0
            while pos < len(sorted_ids):
                file = self._locate(int(sorted_ids[pos]))
                stop = int(np.searchsorted(sorted_ids, file[1], side="right"))
                mapped = self._mapped(file)
                rows = sorted_ids[pos:stop] - file[0]
                for key in out:
                    out[key].append((order[pos:stop], np.take(mapped.array(key), rows, axis=0)))
                pos = stop
            self.rows_read += len(ids)
        result = {}
        for key, parts in out.items():
            if not parts:
                result[key] = np.empty((0,))
                continue
            first = parts[0][1]
            arr = np.empty((len(ids), *first.shape[1:]), np.result_type(*(p for _, p in parts)))
            for where, values in parts:
                arr[where] = values
            result[key] = arr
        return result

    def close(self) -> None:
        """Unmap every file (they are mapped again on the next read)."""
        with self._lock:
            self._open.clear()


def _cover(files: Sequence[tuple[int, int, str]]) -> str:
    if not files:
        return "nothing"
    spans: list[list[int]] = []
    for first, last, _ in files:
        if spans and first == spans[-1][1] + 1:
            spans[-1][1] = last
        else:
            spans.append([first, last])
    text = ", ".join(f"{a}…{b}" for a, b in spans[:6])
    return text + (", …" if len(spans) > 6 else "")


_READERS: dict[str, JournalReader] = {}
_READERS_LOCK = threading.Lock()
#: seconds a reader waits for a journal file the driver has not written yet
WAIT_FOR_FILE = 10.0


def journal_reader(folder: str | os.PathLike[str]) -> JournalReader:
    """The process's one :class:`JournalReader` of ``folder`` (its mapped files shared by
    every read of this process), waiting up to :data:`WAIT_FOR_FILE` seconds for a file."""
    key = os.path.abspath(os.fspath(folder))
    with _READERS_LOCK:
        reader = _READERS.get(key)
        if reader is None:
            reader = _READERS[key] = JournalReader(key, wait=WAIT_FOR_FILE)
        return reader


def resolve_on_disk(values: Sequence[Any], resolve: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """Block values → arrays: :class:`OnDisk` markers read from their journal (mapped rows,
    read-only), every other value through ``resolve`` (one call, in order; not called when
    every value is on disk).

    Raises:
        StoreError: a journal file is missing or damaged (named); as ``resolve``.
    """
    values = list(values)
    others = [i for i, v in enumerate(values) if not isinstance(v, OnDisk)]
    if len(others) == len(values):
        return list(resolve(values)) if values else []
    out: list[Any] = [None] * len(values)
    if others:
        for i, got in zip(others, resolve([values[i] for i in others])):
            out[i] = got
    for i, v in enumerate(values):
        if isinstance(v, OnDisk):
            out[i] = journal_reader(v.folder).block(v.key, v.first, v.n)
    return out
