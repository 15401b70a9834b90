"""How a launch reports while it runs: the :class:`~kestrel.controller._launcher.Launcher`'s polls
of the deployed graph's status (at most every 0.5 s, and at each phase change), the progress
callback, ``RUN/status.json`` and, at the end, ``RUN/profile.json``.

What goes into them is built elsewhere: :mod:`._status` (``status.json`` and the
:class:`~kestrel.report._progress.ProgressState`), :mod:`._profile` (``profile.json``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray

from kestrel.controller._result import RunResult
from kestrel.report._profile import LaunchProfile, summary, write_profile
from kestrel.report._progress import ProgressState
from kestrel.report._status import launch_progress, launch_status
from kestrel.session._session import RunSession
from kestrel_core import RunConfig, StoreError

__all__ = ["LaunchReports"]

_STATUS_EVERY = 0.5  # seconds between progress polls


class LaunchReports:
    """The status and progress reports of a launch (a mixin of ``Launcher``)."""

    session: RunSession
    cfg: RunConfig
    log: logging.Logger
    dg: Any
    result: RunResult
    profile: LaunchProfile
    on_progress: Callable[[ProgressState], None] | None
    stats: dict[str, int]
    _last_report: float
    _node_status: dict[str, dict[str, Any]]

    def _write_status(self) -> None:
        self.session.run.write_status(launch_status(self))

    def _write_profile(self, statuses: dict[str, Any]) -> None:
        """``RUN/profile.json`` (:mod:`._profile`) and its one-line summary; errors logged."""
        try:
            profile = self.profile.build(statuses, list(self.cfg.graph.latents))
            path = write_profile(self.session.run.root, profile)
        except (OSError, KeyError, TypeError, ValueError) as err:
            self.log.warning("profile: not written: %s", err)
            return
        self.log.info("%s → %s", summary(profile), path)

    def _poll_status(self, timeout: float = 2.0) -> dict[str, Any]:
        try:
            status = self.dg.status(timeout=timeout)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError, StoreError):
            return {}
        self.stats = dict(status.get("_store") or {})
        return status

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < _STATUS_EVERY:
            return
        self._last_report = now
        status = self._poll_status() if self.dg is not None else {}
        nodes = {
            m: dict((status.get(m) or {}).get("estimator") or self._node_status.get(m) or {})
            for m in self.cfg.graph.latents
        }
        self._node_status.update({m: v for m, v in nodes.items() if v})
        for m, st in nodes.items():
            if st.get("epoch") is not None:
                self.result.epochs[m] = int(st["epoch"])
        if self.on_progress is not None:
            self.on_progress(launch_progress(self, nodes, now))
