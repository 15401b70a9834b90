"""The trackers of one launch, as its config's ``tracking`` section selects them.

``tracking: {tensorboard: tb}`` (event files in ``RUN/tb``; an absolute folder is used as it
is) and ``tracking: {mlflow: {tracking_uri: …, experiment: …}}``, alone or together.
:func:`check_tracking` imports each selected tracker's package before the launch writes
anything (a missing one names ``pip install 'kestrel[tracking]'``). :class:`LaunchTracking` is
the launch's tracker: a context manager around the launch that opens the trackers, records the
config once, passes on the scalars — every epoch's ``metrics.csv`` row, given by the node-log
sink (:class:`~kestrel.report._nodelog.NodeLogSink`), and the simulation rate and budget at the
polls (:meth:`LaunchTracking.reporting`) — and closes them whichever way the launch ends. A
tracker that fails while the launch runs is said once in the driver's log and dropped: the
launch and its ``metrics.csv`` go on.

Scalars of the polls (step: the run's simulations used so far, which a resume continues):

=======================  =================================================================
``simulation/rate``      valid simulations per second of this launch, since its first
                         simulation began
``simulation/simulated`` valid simulations of this launch
``budget/used``          simulations the run used (``budget.simulations`` set)
``budget/total``         ``budget.simulations``
``budget/fraction``      ``used / total``
=======================  =================================================================
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from kestrel.plot._plot import MissingExtra
from kestrel.report._progress import ProgressState
from kestrel.tracking._mlflow import MLflowTracker, mlflow_client_class
from kestrel.tracking._tensorboard import TensorBoardTracker, summary_writer_class
from kestrel.tracking._tracker import Tracker, flatten_params
from kestrel_core import ConfigError, RunConfig
from kestrel_core.internal import write_atomic

if TYPE_CHECKING:
    from kestrel.controller._budget import Budget

__all__ = ["LaunchTracking", "check_tracking", "tensorboard_dir", "mlflow_uri", "TRACKING_FILE"]

#: ``RUN/tracking.json``: the MLflow run a resumed launch continues
TRACKING_FILE = "tracking.json"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def check_tracking(tracking: Mapping[str, Any]) -> None:
    """Import the package of each tracker ``tracking`` (the config's section) selects.

    Raises:
        MissingExtra: a package is not installed (names the key and
            ``pip install 'kestrel[tracking]'``).
    """
    if "tensorboard" in tracking:
        summary_writer_class()
    if "mlflow" in tracking:
        mlflow_client_class()


def tensorboard_dir(path: str, run_root: str) -> str:
    """The event-file folder of ``tracking.tensorboard``: relative to the run directory."""
    return os.path.join(run_root, os.path.expanduser(path))


def mlflow_uri(uri: str | None, run_root: str) -> str | None:
    """``tracking.mlflow.tracking_uri``: a URI (``scheme:…``) as it is, a relative folder
    inside the run directory (made absolute), ``None`` for MLflow's default."""
    if uri is None or _SCHEME.match(uri):
        return uri
    return os.path.abspath(os.path.join(run_root, os.path.expanduser(uri)))


class LaunchTracking:
    """The trackers of a launch as one :class:`~kestrel.tracking.Tracker` (see the module).

    Args:
        config: the run's :class:`kestrel_core.RunConfig` (its ``tracking`` section; its
            resolved values are the params).
        run_root: the run directory.
        budget: the run's :class:`~kestrel.controller._budget.Budget` (the polls' step and
            ``budget/…``).
        log: the driver's logger.
        launch: this launch's number in the run (``run.json``).
        seed: the run's seed (a param).
        trackers: kind → a factory of the tracker (tests, a tracker of the user's own);
            ``None``: TensorBoard and MLflow as the config selects them.

    Nothing is opened before ``with``; every tracker is closed at its end.
    """

    def __init__(
        self,
        config: RunConfig,
        run_root: str,
        budget: Budget,
        log: logging.Logger,
        *,
        launch: int = 0,
        seed: int | None = None,
        trackers: Mapping[str, Callable[[], Tracker]] | None = None,
    ):
        self._config = config
        self._root = os.fspath(run_root)
        self._budget = budget
        self._log = log
        self._launch = int(launch)
        self._seed = seed
        self._factories = dict(trackers) if trackers is not None else self._selected()
        self._open: dict[str, Tracker] = {}
        self._lock = threading.Lock()
        self._step = -1  # the last poll step logged
        self._last: ProgressState | None = None

    @property
    def active(self) -> bool:
        """Whether any tracker is selected."""
        return bool(self._factories)

    def _selected(self) -> dict[str, Callable[[], Tracker]]:
        tracking = dict(getattr(self._config, "tracking", None) or {})
        factories: dict[str, Callable[[], Tracker]] = {}
        if "tensorboard" in tracking:
            folder = tensorboard_dir(str(tracking["tensorboard"]), self._root)
            factories["tensorboard"] = lambda: TensorBoardTracker(folder, launch=self._launch)
        if "mlflow" in tracking:
            factories["mlflow"] = lambda: self._mlflow(dict(tracking["mlflow"] or {}))
        return factories

    def _mlflow(self, settings: dict[str, Any]) -> MLflowTracker:
        uri = mlflow_uri(settings.get("tracking_uri"), self._root)
        kept = self._read_file().get("mlflow") or {}
        tracker = MLflowTracker(
            uri,
            settings.get("experiment"),
            run_name=os.path.basename(os.path.abspath(self._root)),
            run_id=kept.get("run_id") if kept.get("tracking_uri") == uri else None,
        )
        record = {"mlflow": {"run_id": tracker.run_id, "tracking_uri": uri}}
        write_atomic(os.path.join(self._root, TRACKING_FILE), json.dumps(record, indent=1).encode())
        return tracker

    def _read_file(self) -> dict[str, Any]:
        path = os.path.join(self._root, TRACKING_FILE)
        if not os.path.exists(path):
            return {}
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError) as err:
            self._log.warning("%s: unreadable (%s); a new MLflow run is started", path, err)
            return {}

    # -- the context ---------------------------------------------------------------------------
    def __enter__(self) -> LaunchTracking:
        """Open every selected tracker and record the config.

        Raises:
            MissingExtra: a tracker's package is not installed.
            ConfigError: a tracker cannot be opened (names ``tracking.<kind>`` and the error).
        """
        for kind, factory in self._factories.items():
            try:
                self._open[kind] = factory()
            except (ConfigError, MissingExtra):
                self._close_all("failed")
                raise
            except Exception as err:
                self._close_all("failed")
                raise ConfigError(
                    f"tracking.{kind}: cannot open the tracker: {type(err).__name__}: {err}"
                ) from err
            self._log.info("tracking: %s opened", kind)
        if self._open:
            params = flatten_params(self._config.to_dict())
            params.update({"kestrel.seed": self._seed, "kestrel.launch": self._launch})
            self._each("log_params", params)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._last is not None:
            self._track(self._last)
        status = "finished" if kind is None else "killed" if kind is KeyboardInterrupt else "failed"
        self._close_all(status)

    def _close_all(self, status: str) -> None:
        with self._lock:
            trackers, self._open = self._open, {}
        for kind, tracker in trackers.items():
            try:
                tracker.close(status)
            except Exception as err:  # a tracker's failure never hides the launch's outcome
                self._log.warning(
                    "tracking: %s failed to close: %s: %s", kind, type(err).__name__, err
                )

    # -- the Tracker calls ---------------------------------------------------------------------
    def _each(self, method: str, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            for kind, tracker in list(self._open.items()):
                try:
                    getattr(tracker, method)(*args, **kwargs)
                except Exception as err:
                    del self._open[kind]
                    self._log.warning(
                        "tracking: %s stopped (%s: %s); the launch and its metrics.csv go on",
                        kind,
                        type(err).__name__,
                        err,
                    )
                    try:
                        tracker.close("failed")
                    except Exception:  # already failing: said above
                        pass

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._each("log_params", params)

    def log_scalars(
        self, scalars: Mapping[str, float], step: int, walltime: float | None = None
    ) -> None:
        if scalars:
            self._each("log_scalars", scalars, step, walltime)

    def close(self, status: str = "finished") -> None:
        self._close_all(status)

    # -- the polls -----------------------------------------------------------------------------
    def reporting(self, report: Callable[[ProgressState], None]) -> Callable[[ProgressState], None]:
        """``report`` (the progress reporter's ``update``), then the poll's scalars tracked."""
        if not self.active:
            return report

        def both(state: ProgressState) -> None:
            report(state)
            self._last = state
            self._track(state)

        return both

    def _track(self, state: ProgressState) -> None:
        """The simulation rate and budget, once per new count of simulations used."""
        step = int(self._budget.used)
        if state.simulated <= 0 or step <= self._step:
            return  # nothing simulated yet in this launch, or no simulation since
        self._step = step
        scalars = {"simulation/rate": float(state.rate), "simulation/simulated": state.simulated}
        total = self._budget.total
        if total is not None:
            scalars.update(
                {"budget/used": step, "budget/total": total, "budget/fraction": step / total}
            )
        self.log_scalars(scalars, step)
