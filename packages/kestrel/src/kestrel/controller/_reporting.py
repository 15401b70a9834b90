"""How a launch reports while it runs: the :class:`LaunchReporter` a
:class:`~kestrel.controller._launcher.Launcher` holds polls the deployed graph's status (at most
every 0.5 s, and at each phase change), calls the poll callback (progress, restarts,
checkpoints: :class:`~kestrel.controller._watch.LaunchWatch`), writes ``RUN/status.json`` and,
at the end, ``RUN/profile.json``.

What goes into them is built elsewhere: :mod:`kestrel.report._status` (``status.json`` and the
:class:`~kestrel.report._progress.ProgressState`), :mod:`kestrel.report._profile`
(``profile.json``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import ray

from kestrel.controller._result import RunResult
from kestrel.report._profile import LaunchProfile, summary, write_profile
from kestrel.report._progress import ProgressState
from kestrel.report._status import StatusSource, launch_progress, launch_status
from kestrel.session._session import RunSession
from kestrel_core import RunConfig, StoreError
from kestrel_core.internal import DiskFullError

__all__ = ["LaunchReporter"]

_STATUS_EVERY = 0.5  # seconds between progress polls


class Reported(StatusSource, Protocol):
    """What :class:`LaunchReporter` reads of its launch (a
    :class:`~kestrel.controller._launcher.Launcher`): what :mod:`kestrel.report._status` reads
    (:class:`~kestrel.report._status.StatusSource`), and these."""

    session: RunSession
    cfg: RunConfig
    log: logging.Logger
    dg: Any
    result: RunResult
    profile: LaunchProfile


class LaunchReporter:
    """The status and progress reports of one launch (its launcher's ``reporter``).

    Args:
        launcher: the launch reported on, read at every call: its ``session``, ``cfg``,
            ``log``, ``profile``, ``dg`` (``None`` until deployed: nothing is polled) and
            ``result`` (its ``epochs`` are updated from the polls); ``status.json`` and the
            progress state read the rest (:mod:`kestrel.report._status`: its ``state``,
            ``phase``, ``budget``, ``resume``, ``appends``, …).
        on_poll: called with a :class:`ProgressState` and the deployed graph (``None`` before
            it is) at every :meth:`report`; ``None``: nobody listens (the polls still update
            the result and :attr:`stats`).

    Attributes:
        stats: the store's counts at the latest successful poll (``{}`` before the first).
    """

    def __init__(
        self, launcher: Reported, on_poll: Callable[[ProgressState, Any], None] | None = None
    ) -> None:
        self._launcher = launcher
        self._on_poll = on_poll
        self.stats: dict[str, int] = {}
        self._last_report = 0.0
        self._node_status: dict[str, dict[str, Any]] = {}

    def write_status(self) -> None:
        """Write ``RUN/status.json`` (:func:`~kestrel.report._status.launch_status`).

        Raises:
            DiskFullError: no space for it while the launch runs (it stops). The status of a
                launch that already failed or was aborted is not raised again: that it could
                not be written is said on stderr (the old file stays).
        """
        launcher = self._launcher
        try:
            launcher.session.run.write_status(launch_status(launcher, self.stats))
        except DiskFullError as err:
            status = str(launcher.result.status)
            if status not in ("failed", "aborted"):
                raise
            print(
                f"kestrel: status.json not updated to {status!r}: {err}",
                file=sys.stderr,
                flush=True,
            )

    def write_profile(self, statuses: dict[str, Any]) -> None:
        """``RUN/profile.json`` (:mod:`kestrel.report._profile`) and its one-line summary, from
        the actors' ``statuses`` (``{}``: the driver's parts only); errors logged."""
        launcher = self._launcher
        store_cpu = None
        if statuses and launcher.dg is not None:
            try:
                store_cpu = launcher.dg.store_cpu_seconds(timeout=10.0)
            except (ray.exceptions.RayError, StoreError):
                pass
        try:
            profile = launcher.profile.build(
                statuses, list(launcher.cfg.graph.latents), store_cpu_s=store_cpu
            )
            path = write_profile(launcher.session.run.root, profile)
        except (OSError, KeyError, TypeError, ValueError) as err:
            launcher.log.warning("profile: not written: %s", err)
            return
        launcher.log.info("%s → %s", summary(profile), path)

    def poll_status(
        self, timeout: float = 2.0, *, nodes: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """The deployed graph's status (node → status, ``_store`` → the store's counts, kept
        in :attr:`stats`); ``{}`` when it does not answer within ``timeout`` seconds.
        ``nodes``: ask only these nodes' actors (``None``: every actor, e.g. for the
        profile)."""
        try:
            status = self._launcher.dg.status(timeout=timeout, nodes=nodes)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError, StoreError):
            return {}
        self.stats = dict(status.get("_store") or {})
        return status

    def report(self, force: bool = False) -> None:
        """Poll the estimators and the store (at most every 0.5 s unless ``force``; only what
        is read: not the simulator replicas, whose number the poll's cost would grow with),
        record the estimators' epochs in the result and call the poll callback."""
        now = time.monotonic()
        if not force and now - self._last_report < _STATUS_EVERY:
            return
        self._last_report = now
        launcher = self._launcher
        latents = list(launcher.cfg.graph.latents)
        status = self.poll_status(nodes=latents) if launcher.dg is not None else {}
        nodes = {
            m: dict((status.get(m) or {}).get("estimator") or self._node_status.get(m) or {})
            for m in latents
        }
        self._node_status.update({m: v for m, v in nodes.items() if v})
        for m, st in nodes.items():
            if st.get("epoch") is not None:
                launcher.result.epochs[m] = int(st["epoch"])
        if self._on_poll is not None:
            self._on_poll(launch_progress(launcher, nodes, self.stats, now), launcher.dg)
