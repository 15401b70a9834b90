"""MLflow: a launch's scalars as the metrics of an MLflow run (``mlflow.MlflowClient``).

``tracking: {mlflow: {tracking_uri: …, experiment: …}}`` logs to the MLflow tracking server or
store at ``tracking_uri`` (``None``: MLflow's own default, ``MLFLOW_TRACKING_URI``), in the
experiment ``experiment`` (created when missing; ``None``: MLflow's own default,
``MLFLOW_EXPERIMENT_NAME`` else ``Default``). The MLflow run is named after the run folder;
its id is kept in ``RUN/tracking.json``, so a resumed launch continues the same MLflow run (and
its steps) while a new run folder, or a restart, starts a new one.
``mlflow`` (or ``mlflow-skinny``) is imported when a tracker is made, never before.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from kestrel.plot._plot import MissingExtra
from kestrel.tracking._tensorboard import INSTALL_HINT

__all__ = ["MLflowTracker", "mlflow_client_class", "DEFAULT_EXPERIMENT"]

#: the experiment of a config that names none (and no ``MLFLOW_EXPERIMENT_NAME``): MLflow's
DEFAULT_EXPERIMENT = "Default"
#: MLflow takes at most this many metrics or params in one batch
_BATCH = 100
#: longest parameter value kept (MLflow servers refuse longer ones; older ones above 500)
_MAX_VALUE = 500
_INDEX = re.compile(r"\[(\d+)\]")
_REFUSED = re.compile(r"[^A-Za-z0-9_\-. :/]")
_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}


def mlflow_client_class() -> Any:
    """``mlflow.MlflowClient``.

    Raises:
        MissingExtra: neither ``mlflow`` nor ``mlflow-skinny`` is installed (names the
            install command).
    """
    try:
        mlflow = importlib.import_module("mlflow")
    except ImportError as err:
        raise MissingExtra(
            f"tracking.mlflow: MLflow tracking needs the mlflow package: {INSTALL_HINT} "
            f"(or pip install mlflow-skinny) ({err})"
        ) from None
    return mlflow.MlflowClient


def _entities() -> ModuleType:
    return importlib.import_module("mlflow.entities")


class MLflowTracker:
    """A :class:`~kestrel.tracking.Tracker` logging to one MLflow run.

    Args:
        tracking_uri: where MLflow keeps runs (``http://…``, ``sqlite:///…``, ``file:…``, a
            folder); ``None``: MLflow's default.
        experiment: the experiment's name (created when missing); ``None``:
            ``MLFLOW_EXPERIMENT_NAME``, else MLflow's ``Default``.
        run_name: the MLflow run's name (a new run).
        run_id: an MLflow run to continue (a resumed launch); ``None`` or a run the store does
            not hold: a new run.
        client: an ``MlflowClient``-like object (tests); ``None``: ``mlflow.MlflowClient``.

    Names are made names MLflow accepts: a key path's ``priors[0]`` becomes ``priors.0``.

    Attributes:
        run_id: the MLflow run's id.

    Raises:
        MissingExtra: MLflow is not installed.
        MlflowException: the store cannot be reached or refuses the run (MLflow's own error).
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str | None = None,
        run_name: str | None = None,
        run_id: str | None = None,
        client: Any = None,
    ):
        if client is None:
            client = mlflow_client_class()(tracking_uri=tracking_uri)
        self._client = client
        self.tracking_uri = tracking_uri
        self.run_id = self._continued(run_id) or self._new_run(
            experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT,
            run_name,
        )
        self._logged: dict[str, str] = dict(self._client.get_run(self.run_id).data.params)

    def _continued(self, run_id: str | None) -> str | None:
        if not run_id:
            return None
        try:
            self._client.get_run(run_id)
        except Exception:  # gone from the store (or another store): a new run
            return None
        self._client.update_run(run_id, status="RUNNING")
        return run_id

    def _new_run(self, experiment: str, run_name: str | None) -> str:
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = (
            found.experiment_id if found is not None else self._client.create_experiment(experiment)
        )
        run = self._client.create_run(experiment_id, run_name=run_name)
        return str(run.info.run_id)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """The params the MLflow run does not hold yet (MLflow refuses to change a param: a
        resumed launch's changed values stay in its ``config.yml`` and TensorBoard text)."""
        Param = _entities().Param
        named = {_name(key): value for key, value in params.items()}
        new = {
            key: _value(value)
            for key, value in named.items()
            if key not in self._logged and len(key) <= 250
        }
        items = [Param(key, value) for key, value in new.items()]
        for start in range(0, len(items), _BATCH):
            self._client.log_batch(self.run_id, params=items[start : start + _BATCH])
        self._logged.update(new)

    def log_scalars(
        self, scalars: Mapping[str, float], step: int, walltime: float | None = None
    ) -> None:
        Metric = _entities().Metric
        stamp = int(1000 * (time.time() if walltime is None else float(walltime)))
        items = [
            Metric(_name(name), float(value), stamp, int(step)) for name, value in scalars.items()
        ]
        for start in range(0, len(items), _BATCH):
            self._client.log_batch(self.run_id, metrics=items[start : start + _BATCH])

    def close(self, status: str = "finished") -> None:
        self._client.set_terminated(self.run_id, status=_STATUS.get(status, "FINISHED"))


def _name(key: str) -> str:
    """A key path as MLflow accepts names: ``priors[0][1]`` → ``priors.0.1``, any other
    character MLflow refuses → ``_``."""
    return _REFUSED.sub("_", _INDEX.sub(r".\1", key))


def _value(value: Any) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"
