"""What a launch reports at every poll: ``RUN/status.json`` (also at each phase change) and the
:class:`~kestrel.report._progress.ProgressState` its progress display reads."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from kestrel.report._progress import ProgressState
from kestrel.sample._guards import read_checks

if TYPE_CHECKING:  # the launch loop reports with this module
    from kestrel.controller._appends import Appends
    from kestrel.controller._budget import Budget
    from kestrel.controller._phases import Phase
    from kestrel.controller._result import RunResult
    from kestrel.controller._resume import Resume
    from kestrel.controller._states import LaunchState
    from kestrel.session._session import RunSession

__all__ = ["launch_status", "launch_progress", "StatusSource"]


class StatusSource(Protocol):
    """What :func:`launch_status` and :func:`launch_progress` read of a launch (a
    :class:`~kestrel.controller._launcher.Launcher`)."""

    @property
    def result(self) -> RunResult: ...
    @property
    def session(self) -> RunSession: ...
    @property
    def resume(self) -> Resume: ...
    @property
    def budget(self) -> Budget: ...
    @property
    def state(self) -> LaunchState: ...
    @property
    def phase(self) -> Phase: ...
    @property
    def appends(self) -> Appends: ...
    @property
    def deterministic(self) -> bool: ...
    @property
    def t0(self) -> float: ...
    @property
    def cluster(self) -> dict[str, dict[str, float]]: ...


def launch_status(launcher: StatusSource, buffer: dict[str, int]) -> dict[str, Any]:
    """The status of a :class:`~kestrel.controller._launcher.Launcher` as plain containers;
    ``buffer``: the store's counts at the latest poll.

    Keys: ``status``, ``reason``, ``seed``, ``resumed``, ``restored`` (the buffer counts put
    back), ``epochs``, ``samples``, ``simulated`` (valid rows kept), ``nonfinite``, ``errors``,
    ``restarts``, ``observation_checks`` (what sampling recorded:
    :func:`~kestrel.sample._guards.read_checks`),
    ``budget`` (``total``, ``used``, ``invalid``, ``left``), ``rounds`` (resimulation rounds
    drawn), ``deterministic``, ``buffer`` (the store's counts), ``wall_time`` (s),
    ``placement``, ``cluster``, ``updated`` (local time).
    """
    r, run = launcher.result, launcher.session.run
    restored = launcher.resume.restored
    return {
        "status": r.status,
        "reason": r.reason,
        "seed": r.seed,
        "resumed": r.resumed,
        "restored": restored.counts() if restored else None,
        "epochs": r.epochs,
        "samples": r.samples,
        "simulated": r.simulated,
        "nonfinite": r.nonfinite,
        "errors": r.errors,
        "restarts": r.restarts,
        "observation_checks": read_checks(run),
        "budget": launcher.budget.as_status(),
        "rounds": launcher.state.rounds_drawn(),
        "deterministic": launcher.deterministic,
        "buffer": buffer,
        "wall_time": round(time.monotonic() - launcher.t0, 3),
        "placement": r.placement,
        "cluster": launcher.cluster,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def launch_progress(
    launcher: StatusSource, nodes: dict[str, dict[str, Any]], buffer: dict[str, int], now: float
) -> ProgressState:
    """The :class:`ProgressState` of a launcher at ``time.monotonic()`` ``now``; ``nodes``:
    estimator node → its estimator's latest status; ``buffer``: the store's counts at the latest
    poll. The rate is over the whole launch since its first simulation began."""
    r = launcher.result
    first = launcher.appends.first  # when the launch's first append was submitted
    since = now - first if first is not None else 0.0
    budget = launcher.budget
    return ProgressState(
        now - launcher.t0,
        launcher.phase,
        nodes,
        dict(buffer),
        r.simulated,
        r.simulated / since if since > 0 else 0.0,
        dict(r.nonfinite),
        budget.as_status() if budget.total is not None else {},
    )
