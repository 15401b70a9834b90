"""What a launch reports: the :class:`Phase` it is in and the :class:`RunStatus` it ends with.

Both are string enums: a member equals its text (``RunStatus.COMPLETED == "completed"``) and
prints as it (log lines, the progress display, ``status.json``, ``profile.json``), so the
on-disk format and comparisons with plain strings stay as they were. The launch's states
(:mod:`kestrel.controller._states`) report them; the stop control
(:mod:`kestrel.controller._stop`) says which status a stop ends with.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Phase", "RunStatus"]


class _Text(str, Enum):
    """A string enum that prints as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Phase(_Text):
    """What a launch is doing, in order (``STOPPING`` only after a stop request)."""

    STARTING = "starting"  #: deploying the actors, loading saved weights
    INITIAL_SIMULATION = "initial simulation"  #: filling the buffer from the prior
    TRAINING = "training"  #: estimators train while proposal rounds are simulated
    STOPPING = "stopping"  #: Ctrl-C or timeout: the estimators finish their current step
    SAVING = "saving"  #: writing the estimators' files
    SAMPLING = "sampling"  #: drawing ``sample.posterior.n`` (and ``sample.ppd.n``) samples


class RunStatus(_Text):
    """How a launch stands (``status`` of :class:`~kestrel.RunResult` and ``status.json``)."""

    RUNNING = "running"
    COMPLETED = "completed"  #: every estimator stopped by itself; saved and sampled
    INTERRUPTED = "interrupted"  #: Ctrl-C (or a stop requested by a call); saved and sampled
    TIMEOUT = "timeout"  #: ``timeout`` seconds passed; saved and sampled
    FAILED = "failed"  #: a node raised; every actor killed
    ABORTED = "aborted"  #: a second Ctrl-C; nothing more saved
