"""One writer per run folder: the lock a launch holds on ``RUN/.kestrel.lock`` for its whole life.

A launch (``kestrel launch``, :func:`kestrel.launch`) takes the lock before it writes anything
into the run folder — before a restart moves the old contents to ``previous/N/``, before
``run.json`` or ``config.yml`` is touched — and holds it until it ends, whichever way it ends.
A second launch of the same folder is refused at once (:class:`RunLockedError`), naming the
launch that holds it (its host, pid, start time and command, written in the lock file).
``kestrel sample``, ``plot``, ``export`` and ``check`` read a run without the lock: they never
write the files a launch writes (they write only under ``samples/``, ``plots/``, ``export/``
and ``checks/``).

How it works:

* The lock is an OS file lock (``flock``, exclusive, non-blocking) on ``RUN/.kestrel.lock``.
  The OS releases it when its holder ends, however it ends (``kill -9`` included), so a lock is
  never left held by a dead launch. The file's name starts with a dot: ``--restart`` leaves it
  in place (it moves only the run's own entries), and a folder holding only it counts as empty.
* The folder is created first if it does not exist, then the lock file opened and locked: of
  two launches that start on one new folder at the same instant exactly one gets the lock.
* The holder writes ``{"host", "pid", "started", "time", "command"}`` into the file once it
  holds the lock. A clean release removes the file (and the folder, when the launch created it
  and left it empty). A lock file that names a holder but is not locked was left by a launch
  that did not release it (killed, its machine lost, or the run copied while it ran): the next
  launch takes it over with a one-line note naming that holder (:attr:`RunLock.notes`).
* Network file systems: on Linux, ``flock`` on NFS (v4, or v3 with the lock daemon) is carried
  out as a whole-file lock the server knows, so it works across machines; on a mount without
  locking (NFS ``nolock``) the lock is local to each machine and does not keep two machines
  apart. Where the file system refuses file locks (``ENOLCK``, ``EOPNOTSUPP``, ``ENOSYS``, as
  some FUSE and network file systems do), the launch goes on without a lock and says so (a note
  in :attr:`RunLock.notes`); so does a platform without ``fcntl``.

Pure standard library (no Ray), tested without Ray.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from types import TracebackType

from kestrel_core import KestrelError

try:  # POSIX; elsewhere a launch goes on without a lock (and says so)
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_FILE", "RunLock", "RunLockedError", "Holder", "read_holder"]

#: the lock file of a run folder (hidden: ``--restart`` leaves it where it is)
LOCK_FILE = ".kestrel.lock"
#: errors of a file system that does not do file locks: the launch goes on without one
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, getattr(errno, "ENOTSUP", -1)}
#: how long a refused launch waits for the holder to finish writing its name into the file (s)
_READ_WAIT = 1.0


class RunLockedError(KestrelError):
    """The run folder is held by another launch (the message names it: host, pid, start)."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run's lock, as its lock file says.

    Attributes:
        host: the machine's name. pid: the process id there. started: when it took the lock
            (local time, ``YYYY-mm-dd HH:MM:SS±zone``). command: its command line.
    """

    host: str
    pid: int
    started: str
    command: str = ""

    @classmethod
    def of_this_process(cls, command: str | None = None) -> Holder:
        """This process as a holder (``command``: default its command line)."""
        return cls(
            socket.gethostname(),
            os.getpid(),
            time.strftime("%Y-%m-%d %H:%M:%S%z"),
            _command_line() if command is None else command,
        )

    def describe(self) -> str:
        """``pid 1234 on host node1, started 2025-01-02 10:11:12+0100 (`kestrel launch …`)``."""
        command = f" (`{_shorten(self.command)}`)" if self.command else ""
        return f"pid {self.pid} on host {self.host}, started {self.started}{command}"

    def to_json(self) -> str:
        data = {
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "time": time.time(),
            "command": self.command,
        }
        return json.dumps(data) + "\n"


def _command_line() -> str:
    argv = list(sys.argv) or ["python"]
    program = os.path.basename(argv[0])
    if program in ("__main__.py", "-m") and len(argv) > 1:  # python -m kestrel
        program = "kestrel"
    return shlex.join([program, *argv[1:]])


def _shorten(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parse_holder(text: str) -> Holder | None:
    try:
        data = json.loads(text)
        return Holder(
            str(data["host"]),
            int(data["pid"]),
            str(data.get("started", "?")),
            str(data.get("command", "")),
        )
    except (ValueError, TypeError, KeyError):
        return None


def read_holder(run_dir: str | os.PathLike[str]) -> Holder | None:
    """The holder ``RUN/.kestrel.lock`` names (``None``: no file, or it names nobody). It says
    nothing about whether the lock is held now (see :meth:`RunLock.acquire`)."""
    try:
        with open(os.path.join(os.fspath(run_dir), LOCK_FILE), encoding="utf-8") as fh:
            return _parse_holder(fh.read())
    except (OSError, UnicodeDecodeError):
        return None


def _read_fd(fd: int) -> str:
    try:
        return os.pread(fd, 1 << 16, 0).decode("utf-8", "replace")
    except OSError:
        return ""


class RunLock:
    """The lock of one run folder, held by a launch for its whole life.

    Args:
        run_dir: the run folder (created by :meth:`acquire` when it does not exist).
        command: the command line written into the lock file (default: this process's).

    Attributes:
        root: the run folder (absolute). path: its lock file, ``RUN/.kestrel.lock``.
        locked: whether the OS lock is held (``False`` before :meth:`acquire`, after
            :meth:`release`, and where the file system does not do file locks).
        holder: this launch, as written into the lock file (after :meth:`acquire`).
        previous: the holder a stale lock file named, taken over by :meth:`acquire`.
        notes: one line each: a stale lock taken over, or a launch going on without a lock.

    Use as a context manager (``with RunLock(root): ...``) or call :meth:`acquire` and
    :meth:`release` in ``try``/``finally``; the lock is released on every exit path.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, command: str | None = None):
        self.root = os.path.abspath(os.fspath(run_dir))
        self.path = os.path.join(self.root, LOCK_FILE)
        self.command = command
        self.locked = False
        self.holder: Holder | None = None
        self.previous: Holder | None = None
        self.notes: list[str] = []
        self._fd: int | None = None
        self._acquired = False  # acquired without a lock (no file locks here)
        self._created: list[str] = []  # folders acquire() made, topmost first

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def acquire(self) -> RunLock:
        """Create the run folder if needed, lock ``RUN/.kestrel.lock`` and write this process
        into it; returns ``self``.

        Raises:
            RunLockedError: another launch holds the lock — one line naming it (host, pid,
                start, command) and what to do.
            OSError: the folder or the lock file cannot be created (e.g. no permission).
        """
        if self.holds():
            return self
        for _ in range(100):  # another launch may release (and remove the file) meanwhile
            self._makedirs()
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except FileNotFoundError:  # the folder was removed by a launch releasing it
                continue
            try:
                if not self._lock(fd):  # no locks here: go on without one (a note says so)
                    self._unlocked(fd)
                    return self
                if not self._same_file(fd):  # the file was removed by its releasing holder
                    os.close(fd)
                    continue
                self._take(fd)
            except BaseException:
                self.locked = False
                with contextlib.suppress(OSError):
                    os.close(fd)
                self._remove_created()
                raise
            return self
        raise OSError(errno.EAGAIN, f"{self.path}: could not take the run's lock; try again")

    def _lock(self, fd: int) -> bool:
        """Lock ``fd``; ``False`` where the file system does not do locks (noted).

        Raises:
            RunLockedError: held by another launch.
        """
        if fcntl is None:  # pragma: no cover - not POSIX
            self._note_unlocked("this platform has no file locks (no fcntl)")
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLockedError(self._held_message(fd)) from None
            if err.errno in _UNSUPPORTED:
                self._note_unlocked(f"the file system refuses file locks ({err.strerror})")
                return False
            raise
        self.locked = True
        return True

    def _same_file(self, fd: int) -> bool:
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            ok = False
        else:
            mine = os.fstat(fd)
            ok = (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)
        if not ok:
            fcntl.flock(fd, fcntl.LOCK_UN)
            self.locked = False
        return ok

    def _take(self, fd: int) -> None:
        """Holding the lock: note a stale holder, write this process into the file."""
        self.previous = _parse_holder(_read_fd(fd))
        if self.previous is not None:
            self.notes.append(
                f"{self.path}: taking over the lock of a launch that did not release it "
                f"({self.previous.describe()}): it was killed or its machine lost, or the run "
                "was copied while it ran"
            )
        self.holder = Holder.of_this_process(self.command)
        data = self.holder.to_json().encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as err:  # e.g. a full disk: name the file
            message = f"cannot write the run's lock: {err.strerror}"
            raise OSError(err.errno, message, self.path) from err
        with contextlib.suppress(OSError):
            os.fsync(fd)
        self._fd = fd

    def _unlocked(self, fd: int) -> None:
        """No lock to hold: close the file, removing it when it is empty (this launch made it)."""
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_size == 0 and self._is_file(fd):
                os.unlink(self.path)
        os.close(fd)
        self._acquired = True

    def _note_unlocked(self, why: str) -> None:
        self.notes.append(
            f"{self.path}: {why}; this launch goes on WITHOUT a lock, so nothing keeps a second "
            f"launch from writing {self.root} at the same time: start no other launch of it"
        )

    def _held_message(self, fd: int) -> str:
        deadline = time.monotonic() + _READ_WAIT
        holder = _parse_holder(_read_fd(fd))
        while holder is None and time.monotonic() < deadline:  # it took the lock just now
            time.sleep(0.05)
            holder = _parse_holder(_read_fd(fd))
        who = holder.describe() if holder else f"its holder is not recorded in {self.path}"
        stop = f"Ctrl-C, or `kill -INT {holder.pid}` on {holder.host}" if holder else "Ctrl-C"
        return (
            f"{self.root} is being written by another launch ({who}); one launch writes a run "
            f"at a time: wait for it to end, stop it ({stop}), or launch into another folder "
            "(kestrel sample, plot, export and check may read the run meanwhile)"
        )

    def _makedirs(self) -> None:
        """Create the run folder (and the folders above it) if missing, remembering which."""
        missing = []
        path = self.root
        while not os.path.isdir(path) and os.path.dirname(path) != path:
            missing.append(path)
            path = os.path.dirname(path)
        for folder in reversed(missing):
            # missing when this launch looked: made here, or by another launch racing for it
            # at the same instant — either way the winner removes it at release if empty
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
            if folder not in self._created:
                self._created.append(folder)

    def holds(self) -> bool:
        """Whether :meth:`acquire` succeeded and :meth:`release` has not run yet (with the OS
        lock, or without one where the file system does not do locks)."""
        return self._fd is not None or self._acquired

    def release(self) -> None:
        """Release the lock: remove the lock file (a clean end), unlock, and remove the folders
        :meth:`acquire` created if they are empty. Never raises; a second call does nothing."""
        fd, self._fd = self._fd, None
        acquired, self._acquired = self._acquired, False
        if fd is not None:
            try:
                with contextlib.suppress(OSError):
                    if self._is_file(fd):  # still ours: removed while still locked
                        os.unlink(self.path)
            finally:
                self.locked = False
                with contextlib.suppress(OSError):
                    os.close(fd)  # unlocks
        if fd is not None or acquired:
            self._remove_created()

    def _remove_created(self) -> None:
        """Remove the folders :meth:`acquire` created, deepest first, while they are empty."""
        for folder in reversed(self._created):
            try:
                os.rmdir(folder)
            except OSError:
                break
        self._created = []

    def _is_file(self, fd: int) -> bool:
        now, mine = os.stat(self.path), os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (now.st_dev, now.st_ino)
