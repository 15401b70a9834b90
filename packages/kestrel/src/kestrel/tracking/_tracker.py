"""The tracker interface: what a launch hands to an experiment tracker.

A launch gives its trackers (:mod:`kestrel.tracking._tensorboard`,
:mod:`kestrel.tracking._mlflow`, or an object of the user's own) three calls: the run's config
once per launch (:meth:`Tracker.log_params`), scalars at a step (:meth:`Tracker.log_scalars`:
every epoch's ``metrics.csv`` row of each estimator node, and the simulation rate and budget
at the polls), and :meth:`Tracker.close` when the launch ends, whichever way. Scalar names are
``<group>/<name>``: ``<node>/train_loss`` (replica ``i > 0`` of a multiplexed node:
``<node>.<i>/…``), ``simulation/rate``, ``budget/used``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["Tracker", "flatten_params", "CLOSE_STATUSES"]

#: how a launch ended, as :meth:`Tracker.close` is told
CLOSE_STATUSES = ("finished", "failed", "killed")


@runtime_checkable
class Tracker(Protocol):
    """An experiment tracker of a launch.

    The calls come from the driver: ``log_scalars`` from its node-log thread (the epochs) and
    its main thread (the polls), never at the same time (the launch serialises them).
    """

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Record the run's config once per launch.

        Args:
            params: dotted key path (``"buffer.min_samples"``) → value (str, int, float,
                bool or ``None``), as :func:`flatten_params` gives them.
        """
        ...

    def log_scalars(
        self, scalars: Mapping[str, float], step: int, walltime: float | None = None
    ) -> None:
        """Record scalars at one step.

        Args:
            scalars: name (``"<group>/<name>"``) → value (finite or not).
            step: the step (an epoch for a node's metrics; the run's simulations used so far
                for ``simulation/…`` and ``budget/…``); a resumed run continues its steps.
            walltime: when the values were recorded (seconds since the epoch, ``time.time()``);
                ``None``: now.
        """
        ...

    def close(self, status: str = "finished") -> None:
        """Flush and release; called once when the launch ends.

        Args:
            status: ``"finished"`` (the launch returned: completed, interrupted or timed out),
                ``"failed"`` (it raised) or ``"killed"`` (a second Ctrl-C).
        """
        ...


def flatten_params(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted key paths; lists become ``key[i]``, other values stay.

    Example:
        >>> flatten_params({"buffer": {"min_samples": 64}, "graph": {"x": {"parents": ["z"]}}})
        {'buffer.min_samples': 64, 'graph.x.parents[0]': 'z'}
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        _flatten_into(out, path, value)
    return out


def _flatten_into(out: dict[str, Any], path: str, value: Any) -> None:
    if isinstance(value, Mapping):
        if not value:
            out[path] = "{}"
        for key, item in value.items():
            _flatten_into(out, f"{path}.{key}", item)
    elif isinstance(value, (list, tuple)):
        if not value:
            out[path] = "[]"
        for i, item in enumerate(value):
            _flatten_into(out, f"{path}[{i}]", item)
    elif value is None or isinstance(value, (str, int, float, bool)):
        out[path] = value
    else:
        out[path] = str(value)
