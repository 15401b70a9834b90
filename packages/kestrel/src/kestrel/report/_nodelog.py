"""Node logs and metrics of a launch, written by the driver.

``RunNodeWrapper`` (the node actor class of a launch) keeps, inside the actor process,

* every log record of level ``INFO`` and above (Kestrel's own loggers, the estimator's epoch
  lines, user code that logs), formatted, and
* what the actor's code prints: ``sys.stdout`` and ``sys.stderr`` of the actor process (the
  simulator's ``print``, Python warnings) are replaced by line-buffered writers whose lines
  (``… INFO stdout: <line>``) join the log (:mod:`~kestrel.report._actorio`), and
* one row per finished epoch of the node's estimator (``epoch, walltime, train_loss,
  val_loss, best_val_loss, lr, samples_seen``),

until the driver collects them with :meth:`RunNodeWrapper.drain`. :class:`NodeLogSink` (a
named thread on the driver) drains every actor about once a second and when the run ends, and
appends to ``<graph>/<node>/output.log`` and ``metrics.csv`` (replica ``i > 0`` of a
multiplexed node: ``output.<i>.log``, ``metrics.<i>.csv``), and hands every metrics row to
the launch's tracker, when its config has one (:mod:`kestrel.tracking`). No actor writes a file: on a
cluster the actor's machine has its own disk, and the run directory lives with the driver.

Log records of level ``WARNING`` and above also reach the driver's console: the sink prints
them to its ``sys.stderr`` (``node x: WARNING …``). A launch turns Ray's own forwarding of the
actors' output off (``log_to_driver=False``): a simulator printing 200 lines per call would
flood the console, and all of it is in ``output.log``; a simulator's exception reaches the
driver as the error of its call, as it did. A row is recorded when the estimator logs (its training loop logs once per epoch)
and when ``train`` returns, whichever sees a new epoch counter first.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import ray

from kestrel.report._actorio import capture_prints, capture_warnings
from kestrel_core.internal import as_disk_full, disk_full_guard
from kestrel_ray import NodeWrapper

if TYPE_CHECKING:
    from kestrel.tracking import Tracker
    from kestrel_ray import StoreHandle

__all__ = ["RunNodeWrapper", "NodeLogSink", "METRIC_COLUMNS", "metric_scalars"]

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
#: log lines an actor keeps between two drains (older ones are dropped)
MAX_PENDING_LINES = 20_000


class _Collect(logging.Handler):
    """Keeps formatted records for the driver; records a metrics row when the epoch moved."""

    def __init__(self, owner: RunNodeWrapper):
        super().__init__(level=logging.INFO)
        self.setFormatter(logging.Formatter(_FORMAT))
        self._owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # a record that cannot be formatted must not break the caller
            self.handleError(record)
            return
        with self._owner._buffer_lock:
            self._owner._lines.append(line)
            if record.levelno >= logging.WARNING:
                self._owner._console.append(f"node {self._owner._name}: {line.split(' ', 2)[2]}")
        if record.name.startswith("kestrel"):
            self._owner._record_metrics()


class RunNodeWrapper(NodeWrapper):
    """Node actor of a launch: a :class:`NodeWrapper` whose log and metrics the driver collects."""

    _handlers: list[logging.Handler] = []
    _last_epoch: int | None = None

    def _buffers(self) -> None:
        # records arrive from the event loop, the simulator's worker thread and the loader's
        # fetch thread: one lock guards the buffers and the epoch counter
        if not hasattr(self, "_lines"):
            self._buffer_lock = threading.Lock()
            self._lines: collections.deque[str] = collections.deque(maxlen=MAX_PENDING_LINES)
            self._rows: list[list[str]] = []
            self._console: collections.deque[str] = collections.deque(maxlen=1000)

    async def open_log(self) -> dict[str, Any]:
        """Start collecting this actor's log records and its estimator's metrics rows.

        Returns:
            ``{"replica": replica index, "pid": process id, "node_id": Ray node id (hex) of
            the machine the actor runs on}``.
        """
        self._buffers()
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
        handlers: list[logging.Handler] = [_Collect(self)]
        capture_prints(self._keep)
        capture_warnings()
        if self._estimator is not None:
            self._last_epoch = int(self._estimator.status().get("epoch") or 0)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(min(root.level or logging.WARNING, logging.INFO))
        for name in ("kestrel", "kestrel_core", "kestrel_ray", "kestrel_torch"):
            logging.getLogger(name).setLevel(logging.INFO)
        self._handlers = handlers
        node_id = ray.get_runtime_context().get_node_id()
        logging.getLogger("kestrel_ray").info(
            "node %s: actor pid %d on Ray node %s", self._name, os.getpid(), node_id
        )
        return {"replica": self._replica, "pid": os.getpid(), "node_id": node_id}

    def _keep(self, lines: list[str]) -> None:
        self._buffers()
        with self._buffer_lock:
            self._lines.extend(lines)

    async def drain(self) -> dict[str, Any]:
        """The log lines and metrics rows recorded since the last call (then forgotten).

        Returns:
            ``{"log": [line, …], "metrics": [[field, …], …], "console": [line, …]}``
            (``console``: the ``WARNING`` records, for the driver's console).
        """
        self._buffers()
        with self._buffer_lock:
            lines, self._lines = self._lines, collections.deque(maxlen=MAX_PENDING_LINES)
            rows, self._rows = self._rows, []
            console, self._console = self._console, collections.deque(maxlen=1000)
        return {"log": list(lines), "metrics": rows, "console": list(console)}

    async def load_bytes(self, data: bytes, source: str = "checkpoint bytes") -> None:
        """Load the estimator (see :meth:`NodeWrapper.load_bytes`); metrics continue its epochs."""
        await super().load_bytes(data, source)
        if self._estimator is not None:
            self._last_epoch = int(self._estimator.status().get("epoch") or 0)
            logging.getLogger("kestrel_ray").info(
                "node %s: loaded %s (epoch %d)", self._name, source, self._last_epoch
            )

    async def train(self, store: StoreHandle) -> dict[str, Any]:
        """Train (see :meth:`NodeWrapper.train`), then record the last epoch's metrics row."""
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
        if self._estimator is None or self._last_epoch is None:
            return
        self._buffers()
        status = self._estimator.status()
        epoch = int(status.get("epoch") or 0)
        with self._buffer_lock:
            if epoch == self._last_epoch:
                return
            self._last_epoch = epoch
            self._rows.append(
                [str(epoch), f"{time.time():.3f}"]
                + [_fmt(status.get(c)) for c in METRIC_COLUMNS[2:]]
            )


def metric_scalars(tag: str, row: list[str]) -> dict[str, float]:
    """A ``metrics.csv`` row (fields as :data:`METRIC_COLUMNS`) as tracker scalars:
    ``<tag>/<column>`` → value for each column after ``epoch`` and ``walltime`` (the step and
    the time of the tracker's record) that has a value."""
    return {
        f"{tag}/{column}": float(value)
        for column, value in zip(METRIC_COLUMNS[2:], row[2:])
        if value != ""
    }


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


class NodeLogSink:
    """Drains the node actors of a launch into ``<graph>/<node>/`` on the driver.

    Args:
        actors: node → its actors, replica ``i`` at index ``i``.
        directory_of: node → its folder on the driver.
        estimators: the nodes with an estimator (they get ``metrics.csv``).
        interval: seconds between two drains.
        tracker: gets every ``metrics.csv`` row as well (:class:`kestrel.tracking.Tracker`:
            ``<node>/<column>`` at step ``epoch``, ``<node>.<i>/…`` for replica ``i > 0``;
            :func:`metric_scalars`); ``None``: none.

    The thread (``kestrel-node-logs``) runs between :meth:`start` and :meth:`stop`; ``stop``
    drains once more, so nothing an actor recorded before it is lost. An actor that cannot be
    reached (it died) is skipped; the failure reaches the driver through the call that was
    running on it. A file that cannot be written (a full disk) stops every write of the sink,
    said once on stderr (:attr:`failed`); the launch stops at its own next write.
    """

    def __init__(
        self,
        actors: Mapping[str, list[Any]],
        directory_of: Callable[[str], str],
        estimators: list[str],
        interval: float = 1.0,
        tracker: Tracker | None = None,
    ):
        self._tracker = tracker
        self._actors = {name: list(group) for name, group in actors.items()}
        self._dirs = {name: directory_of(name) for name in actors}
        self._estimators = set(estimators)
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        #: (node, replica) → a drain call not answered yet: waited for again, never re-sent,
        #: since the actor forgot what it answered
        self._pending: dict[tuple[str, int], Any] = {}
        self._thread: threading.Thread | None = None
        #: why the files are no longer written (``None``: they are)
        self.failed: str | None = None
        for name, group in self._actors.items():
            os.makedirs(self._dirs[name], exist_ok=True)
            if name in self._estimators:
                for i in range(len(group)):
                    path = self._path(name, "metrics", i, "csv")
                    if not os.path.exists(path):
                        with disk_full_guard(path), open(path, "w", encoding="utf-8") as fh:
                            fh.write(",".join(METRIC_COLUMNS) + "\n")

    def _path(self, name: str, stem: str, replica: int, ext: str) -> str:
        suffix = f".{replica}" if replica else ""
        return os.path.join(self._dirs[name], f"{stem}{suffix}.{ext}")

    def start(self) -> NodeLogSink:
        self._thread = threading.Thread(target=self._run, name="kestrel-node-logs", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.drain()

    def drain(self, wait: float = 30.0) -> None:
        """Collect from every actor once and append to the files; an actor that has not
        answered within ``wait`` seconds (all actors together: a replica whose machine was
        lost waits for its restart) is asked again at the next drain."""
        with self._lock:
            for name, group in self._actors.items():
                for i, actor in enumerate(group):
                    if (name, i) not in self._pending:
                        self._pending[name, i] = actor.drain.remote()
            refs = list(self._pending.values())
            ready = ray.wait(refs, num_returns=len(refs), timeout=wait)[0] if refs else []
            answered = set(ready)
            for (name, i), ref in list(self._pending.items()):
                if ref not in answered:
                    continue  # still pending: collected at the next drain
                try:
                    got = ray.get(ref, timeout=0)
                except ray.exceptions.GetTimeoutError:
                    continue
                except (ray.exceptions.RayError, TimeoutError):
                    del self._pending[name, i]  # the actor is gone
                    continue
                del self._pending[name, i]
                for line in got.get("console", ()):
                    print(line, file=sys.stderr, flush=True)
                if got["log"]:
                    self._append(self._path(name, "output", i, "log"), got["log"])
                if got["metrics"] and name in self._estimators:
                    rows = [",".join(row) for row in got["metrics"]]
                    self._append(self._path(name, "metrics", i, "csv"), rows)
                    if self._tracker is not None:
                        for row in got["metrics"]:
                            tag = f"{name}.{i}" if i else name
                            self._tracker.log_scalars(
                                metric_scalars(tag, row), int(row[0]), float(row[1])
                            )

    def _append(self, path: str, lines: list[str]) -> None:
        """Append ``lines`` to ``path``; after a failed write (a full disk), say so once on
        stderr and write no more (the launch stops at its next write of its own files)."""
        if self.failed is not None:
            return
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        except OSError as err:
            full = as_disk_full(err, path)
            self.failed = str(full) if full is not None else f"cannot write {path}: {err}"
            print(
                f"kestrel: the node logs are no longer written ({self.failed})",
                file=sys.stderr,
                flush=True,
            )

    def stop(self) -> None:
        """Stop the thread and drain a last time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        # an actor still owing an answer from the drains before (its node lost, say) gets 5 s
        self.drain(wait=5.0 if self._pending else 30.0)
