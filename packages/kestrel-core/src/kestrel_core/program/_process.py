"""The process side of a :class:`~kestrel_core.program.Program` call: the tail of its stderr,
killing its process group, the guard process that kills the group if the caller dies, and the
name of the signal that ended it."""

from __future__ import annotations

import os
import signal
import subprocess


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "    (its stderr could not be read)"
    kept = [line[:500] for line in text.splitlines() if line.strip()][-lines:]
    if not kept:
        return "    (its stderr was empty)"
    return "\n".join(f"    {line}" for line in kept)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _Guard:
    """A ``sh`` process that kills the command's process group if this process dies first.

    It reads a line from a pipe whose only writer is this process: ``done`` when the call ends
    normally; end of file when this process was killed (a node's ``timeout`` kills the actor's
    process), and then it kills the group, so no orphan keeps running.
    """

    SCRIPT = 'read line; [ "$line" = done ] || kill -s KILL -- -"$1" 2>/dev/null; exit 0'

    def __init__(self, pgid: int):
        self.proc: subprocess.Popen[bytes] | None = None
        self.fd: int | None = None
        if not os.path.exists("/bin/sh"):  # pragma: no cover - POSIX without /bin/sh
            return
        r, w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", self.SCRIPT, "kestrel-program-guard", str(pgid)],
                stdin=r,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.fd = w
        except OSError:  # pragma: no cover - cannot fork: the call runs unguarded
            os.close(w)
        finally:
            os.close(r)

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.write(self.fd, b"done\n")
            except OSError:  # pragma: no cover
                pass
            os.close(self.fd)
            self.fd = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self.proc.kill()
            self.proc = None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown signal"
