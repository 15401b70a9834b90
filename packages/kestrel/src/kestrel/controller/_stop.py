"""Graceful stop of a launch: Ctrl-C, SIGTERM, ``--timeout``, or a call from another thread.

The first SIGINT (Ctrl-C) asks for a graceful stop: the launch loop stops simulating, asks the
estimators to stop after their current step, saves their weights and the buffer, and samples
the posterior if that finishes in time; the run's status becomes ``"interrupted"`` (``kestrel
launch`` then exits with status 130). SIGTERM — what a batch scheduler or ``kill`` sends — does
the same (exit status 143). A stop stops in every phase: whatever the launch waits for after
the request (an initial-simulation chunk, a resimulation round, the final samples) it waits for
at most :data:`STOP_GRACE` seconds (:meth:`StopControl.waited_enough`); calls still running then
are abandoned (their rows never reach the store; the session kills their actors). A second
signal raises :class:`KeyboardInterrupt` at once (abort: the actors are killed, nothing more is
saved). Either way the exit status is that of the first signal (:func:`interrupt_exit_status`:
130 for SIGINT, 143 for SIGTERM). A timeout triggers the same graceful stop as the first
Ctrl-C; the run's status becomes ``"timeout"`` (exit status 0).

Before a launch's :class:`StopControl` is in place (config checks, the dry run, Ray's start),
:func:`signals_interrupt` makes SIGTERM raise :class:`KeyboardInterrupt` as SIGINT does, so that
phase ends at once with the same exit statuses (nothing has been simulated yet).

The handlers are installed only while a launch runs, only from the main thread (Python delivers
signals there), and the previous handlers are restored afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

from kestrel.controller._phases import RunStatus
from kestrel.report._env import env_seconds

__all__ = ["StopControl", "STOP_GRACE", "interrupt_exit_status", "signals_interrupt"]


#: seconds a stopping launch waits for calls still running (simulation chunks and rounds in
#: flight, the final samples) before it abandons them; ``KESTREL_STOP_GRACE`` overrides it
STOP_GRACE = env_seconds("KESTREL_STOP_GRACE", 10.0)

_first_signal: list[int] = []  # the signal that began the stop of this process, if any


def _record(signum: int) -> None:
    if not _first_signal:
        _first_signal.append(int(signum))


def interrupt_exit_status() -> int:
    """The exit status of a command ended by a signal: 128 + the first signal's number (130
    for SIGINT, 143 for SIGTERM; 130 when no signal was seen, e.g. a KeyboardInterrupt raised
    by code)."""
    return 128 + (_first_signal[0] if _first_signal else int(signal.SIGINT))


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """While inside, SIGINT and SIGTERM raise :class:`KeyboardInterrupt` (the signal is
    remembered for :func:`interrupt_exit_status`); the previous handlers come back on exit.
    A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    _first_signal.clear()  # a new command: no signal seen yet

    def interrupt(signum: int, frame: FrameType | None) -> None:
        _record(signum)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class StopControl:
    """Tracks whether (and why) a launch should stop.

    Args:
        timeout: seconds after :meth:`start` at which :attr:`requested` becomes true (``None``:
            never).
        handle_sigint: install the two-stage Ctrl-C handler while the control is active
            (ignored outside the main thread).
    """

    def __init__(self, timeout: float | None = None, *, handle_sigint: bool = True):
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = timeout
        self.reason: str | None = None
        self._event = threading.Event()
        self._deadline: float | None = None
        self._handle_sigint = handle_sigint
        self._previous: dict[int, Any] = {}
        self._interrupts = 0
        self._since: float | None = None  # when the stop was requested (monotonic)
        #: seconds calls still running may take after a stop request (:data:`STOP_GRACE`)
        self.grace = STOP_GRACE
        self.timed_out = False
        #: the signal that asked for the stop (``signal.SIGINT``/``SIGTERM``), else ``None``
        self.signal: int | None = None

    def __enter__(self) -> StopControl:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        """Start the timeout clock and install the SIGINT and SIGTERM handlers."""
        self._deadline = None if self.timeout is None else time.monotonic() + float(self.timeout)
        _first_signal.clear()  # a new launch: no signal seen yet
        if self._handle_sigint and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def close(self) -> None:
        """Restore the previous SIGINT and SIGTERM handlers."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def request(self, reason: str = "requested") -> None:
        """Ask for a graceful stop (thread-safe); the first reason given is kept."""
        if self.reason is None:
            self.reason = reason
            self._since = time.monotonic()
        self._event.set()

    def waited_enough(self, grace: float | None = None) -> bool:
        """A stop was requested at least ``grace`` seconds ago (default :attr:`grace`):
        what the launch still waits for is abandoned."""
        if not self.requested or self._since is None:
            return False
        return time.monotonic() - self._since >= (self.grace if grace is None else grace)

    @property
    def requested(self) -> bool:
        """Whether a graceful stop was asked for (checks the timeout too)."""
        if (
            not self._event.is_set()
            and self._deadline is not None
            and time.monotonic() >= self._deadline
        ):
            self.timed_out = self.reason is None
            self.request(f"timeout after {self.timeout:g} s")
        return self._event.is_set()

    @property
    def status(self) -> RunStatus:
        """How a launch that ends now ends: ``completed`` (no stop asked for), ``timeout``
        (the timeout came first) or ``interrupted`` (Ctrl-C or :meth:`request`)."""
        if not self.requested:
            return RunStatus.COMPLETED
        return RunStatus.TIMEOUT if self.timed_out else RunStatus.INTERRUPTED

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._interrupts += 1
        _record(signum)
        if self._interrupts == 1:
            self.signal = signum
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            self.request(f"interrupted ({name})")
            print(
                f"\nkestrel: {name}: stopping gracefully (current step ends, calls still "
                f"running after {STOP_GRACE:g} s are abandoned, weights and the buffer are "
                "saved, the posterior is sampled if it can be in time); Ctrl-C again aborts",
                flush=True,
            )
            return
        raise KeyboardInterrupt
