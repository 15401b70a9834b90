"""``RunNodeWrapper``: a :class:`~kestrel_ray.NodeWrapper` that writes its node's log and metrics.

A launch deploys its graph with this actor class and then calls :meth:`RunNodeWrapper.open_log`
once per actor, which sends, inside the actor process,

* every log record of level ``INFO`` and above (Kestrel's own loggers, the estimator's epoch
  lines, user code that logs) to ``<graph>/<node>/output.log`` (replica ``i > 0`` of a
  multiplexed node writes ``output.<i>.log``), and
* one row per finished epoch of the node's estimator to ``<graph>/<node>/metrics.csv``
  (``epoch, walltime, train_loss, val_loss, best_val_loss, lr, samples_seen``).

Warnings (level ``WARNING`` and above) still reach the driver's console through Ray's log
forwarding. The row is written when the estimator logs (its training loop logs once per epoch)
and when ``train`` returns, whichever sees a new epoch counter first.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from .._wrapper import NodeWrapper

__all__ = ["RunNodeWrapper", "METRIC_COLUMNS"]

#: columns of ``metrics.csv``
METRIC_COLUMNS = (
    "epoch",
    "walltime",
    "train_loss",
    "val_loss",
    "best_val_loss",
    "lr",
    "samples_seen",
)
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _EpochHandler(logging.Handler):
    """Writes a metrics row whenever a log record arrives after the epoch counter moved."""

    def __init__(self, owner: RunNodeWrapper):
        super().__init__(level=logging.DEBUG)
        self._owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("kestrel"):
            self._owner._record_metrics()


class RunNodeWrapper(NodeWrapper):
    """Node actor of a launch: a :class:`NodeWrapper` plus a log file and a metrics file."""

    _log_handlers: list[logging.Handler] = []
    _metrics_path: str | None = None
    _last_epoch: int | None = None

    async def open_log(self, directory: str) -> dict[str, Any]:
        """Send this actor's logging to ``<directory>/output.log`` (created; appended to).

        Args:
            directory: the node's folder, ``<graph>/<node>``.

        Returns:
            ``{"log": path of the log file, "pid": process id, "node_id": Ray node id (hex) of
            the machine the actor runs on}``.
        """
        os.makedirs(directory, exist_ok=True)
        suffix = f".{self._replica}" if self._replica else ""
        path = os.path.join(directory, f"output{suffix}.log")
        root = logging.getLogger()
        for handler in self._log_handlers:
            root.removeHandler(handler)
        to_file = logging.FileHandler(path, encoding="utf-8")
        to_file.setLevel(logging.INFO)
        to_file.setFormatter(logging.Formatter(_FORMAT))
        to_console = logging.StreamHandler(sys.stderr)
        to_console.setLevel(logging.WARNING)
        to_console.setFormatter(
            logging.Formatter(f"node {self._name}: %(levelname)s %(name)s: %(message)s")
        )
        handlers: list[logging.Handler] = [to_file, to_console]
        if self._estimator is not None:
            self._metrics_path = os.path.join(directory, f"metrics{suffix}.csv")
            status = self._estimator.status()
            self._last_epoch = int(status.get("epoch") or 0)
            if not os.path.exists(self._metrics_path):
                with open(self._metrics_path, "w", encoding="utf-8") as fh:
                    fh.write(",".join(METRIC_COLUMNS) + "\n")
            handlers.append(_EpochHandler(self))
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(min(root.level or logging.WARNING, logging.INFO))
        for name in ("kestrel", "kestrel_core", "kestrel_ray", "kestrel_torch"):
            logging.getLogger(name).setLevel(logging.INFO)
        self._log_handlers = handlers
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        logging.getLogger("kestrel_ray").info(
            "node %s: actor pid %d on Ray node %s logging to %s",
            self._name,
            os.getpid(),
            node_id,
            path,
        )
        return {"log": path, "pid": os.getpid(), "node_id": node_id}

    async def load(self, directory: str) -> None:
        """Load the estimator (see :meth:`NodeWrapper.load`); the metrics continue its epochs."""
        await super().load(directory)
        if self._estimator is not None:
            self._last_epoch = int(self._estimator.status().get("epoch") or 0)
            logging.getLogger("kestrel_ray").info(
                "node %s: loaded weights from %s (epoch %d)",
                self._name,
                directory,
                self._last_epoch,
            )

    async def train(self, store: Any) -> dict[str, Any]:
        """Train (see :meth:`NodeWrapper.train`), then write the last epoch's metrics row."""
        log = logging.getLogger("kestrel_ray")
        log.info("node %s: training starts", self._name)
        try:
            return await super().train(store)
        except BaseException as err:
            log.error("node %s: training failed: %s: %s", self._name, type(err).__name__, err)
            raise
        finally:
            self._record_metrics()
            log.info("node %s: training ended (%s)", self._name, self._state)

    def _record_metrics(self) -> None:
        if self._estimator is None or self._metrics_path is None:
            return
        status = self._estimator.status()
        epoch = int(status.get("epoch") or 0)
        if epoch == self._last_epoch:
            return
        self._last_epoch = epoch
        row = [epoch, f"{time.time():.3f}"] + [_fmt(status.get(c)) for c in METRIC_COLUMNS[2:]]
        with open(self._metrics_path, "a", encoding="utf-8") as fh:
            fh.write(",".join(str(v) for v in row) + "\n")


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)
