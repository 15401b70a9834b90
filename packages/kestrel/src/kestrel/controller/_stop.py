"""Graceful stop of a launch: Ctrl-C, SIGTERM, ``--timeout``, or a call from another thread.

The first SIGINT (Ctrl-C) asks for a graceful stop: the launch loop stops simulating, asks the
estimators to stop after their current step, saves their weights and the buffer, and still
samples the posterior; the run's status becomes ``"interrupted"`` (``kestrel launch`` then exits
with status 130). SIGTERM — what a batch scheduler or ``kill`` sends — does the same (exit status
143). A second signal raises :class:`KeyboardInterrupt` at once (abort: the actors are killed,
nothing more is saved). A timeout triggers the same graceful stop as the first Ctrl-C; the
run's status becomes ``"timeout"`` (exit status 0).

The handlers are installed only while a launch runs, only from the main thread (Python delivers
signals there), and the previous handlers are restored afterwards.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any

from kestrel.controller._states import RunStatus

__all__ = ["StopControl"]


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
        self.timed_out = False
        #: the signal that asked for the stop (``signal.SIGINT``/``SIGTERM``), else ``None``
        self.signal: int | None = None

    def __enter__(self) -> StopControl:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start the timeout clock and install the SIGINT and SIGTERM handlers."""
        self._deadline = None if self.timeout is None else time.monotonic() + float(self.timeout)
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
        self._event.set()

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
        if self._interrupts == 1:
            self.signal = signum
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            self.request(f"interrupted ({name})")
            print(
                f"\nkestrel: {name}: stopping gracefully (current step ends, weights and the "
                "buffer are saved, the posterior is sampled); Ctrl-C again aborts",
                flush=True,
            )
            return
        raise KeyboardInterrupt
