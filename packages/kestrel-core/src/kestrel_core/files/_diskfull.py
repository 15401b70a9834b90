"""A write that failed because its disk is full (or over quota, or read-only).

Every file Kestrel writes goes through :func:`~kestrel_core.files._atomic.write_atomic`,
:func:`~kestrel_core.files._npz.save_npz` or a block guarded by :func:`disk_full_guard`: an
``OSError`` with errno ``ENOSPC``, ``EDQUOT`` or ``EROFS`` leaves them as one
:class:`DiskFullError` naming the file and the space left on its filesystem, after the
temporary file of the write was removed (the old file, if any, is intact). Whoever runs a
launch recognises that one type and stops once, instead of retrying on a full disk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator

from kestrel_core._errors import KestrelError

__all__ = ["DiskFullError", "DISK_FULL_ERRNOS", "free_bytes", "as_disk_full", "disk_full_guard"]

#: the errnos of a write that cannot succeed until someone frees space or remounts
DISK_FULL_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EROFS) if code
)


class DiskFullError(KestrelError, OSError):
    """A file could not be written: its disk is full, the user's quota is spent, or the
    filesystem is read-only.

    An :class:`OSError` (``errno``, ``strerror``, ``filename`` set) and a
    :class:`~kestrel_core.KestrelError` (one line: the file, the cause, the space left).

    Args:
        path: the file that could not be written.
        free: bytes free on its filesystem (``None``: unknown).
        code: the errno (default ``ENOSPC``).
        need: bytes the write needed, when known (a check before writing).
        remedy: what to do, appended to the message (set by whoever knows the run: e.g. how
            to continue it).

    Attributes:
        path, free, need, remedy: as given.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        free: int | None,
        code: int = errno.ENOSPC,
        *,
        need: int | None = None,
        remedy: str | None = None,
    ):
        self.path = os.fspath(path)
        self.free = free
        self.need = need
        self.remedy = remedy
        OSError.__init__(self, code, os.strerror(code), self.path)

    def __str__(self) -> str:
        free = f"{_size(self.free)} free there" if self.free is not None else "free space unknown"
        if self.need is not None:  # a check before writing
            text = f"{self.path}: not enough space: needs {_size(self.need)}, {free}"
        else:
            text = f"cannot write {self.path}: {self.strerror} ({free})"
        return f"{text}; {self.remedy}" if self.remedy else text

    def __reduce__(self):  # pickles (Ray) with its arguments, not OSError's
        return (
            _rebuild,
            (self.path, self.free, self.errno, self.need, self.remedy),
        )


def _rebuild(path: str, free: int | None, code: int, need: int | None, remedy: str | None):
    return DiskFullError(path, free, code, need=need, remedy=remedy)


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "unknown"
    value, units = float(nbytes), ("B", "KiB", "MiB", "GiB", "TiB")
    unit = 0
    while abs(value) >= 1024 and unit < len(units) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:.3g} {units[unit]}"


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free (for this user) on the filesystem of ``path`` or of its nearest existing
    folder; ``None`` when it cannot be told."""
    folder = os.path.abspath(os.fspath(path))
    while True:
        try:
            return int(shutil.disk_usage(folder).free)
        except OSError:
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent


def as_disk_full(err: BaseException, path: str | os.PathLike[str]) -> DiskFullError | None:
    """``err`` as a :class:`DiskFullError` naming ``path`` when it is one of
    :data:`DISK_FULL_ERRNOS` (it is returned as it is when it already is one); else ``None``."""
    if isinstance(err, DiskFullError):
        return err
    code = err.errno if isinstance(err, OSError) else None
    if code is not None and code in DISK_FULL_ERRNOS:
        return DiskFullError(path, free_bytes(path), code)
    return None


@contextlib.contextmanager
def disk_full_guard(path: str | os.PathLike[str], *cleanup: str) -> Iterator[None]:
    """Run a write of ``path``: a disk-full ``OSError`` inside leaves as :class:`DiskFullError`
    (chained to it); any error first removes the files ``cleanup`` (a temporary file the
    write left; missing ones are ignored).

    Raises:
        DiskFullError: the write failed with ``ENOSPC``, ``EDQUOT`` or ``EROFS``.
    """
    try:
        yield
    except BaseException as err:
        for name in cleanup:
            with contextlib.suppress(OSError):
                os.unlink(name)
        full = as_disk_full(err, path)
        if full is None or full is err:
            raise
        raise full from err
