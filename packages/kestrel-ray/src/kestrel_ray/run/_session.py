"""What ``launch`` and ``sample`` share: the driver log, Ray for one run, the deployed graph.

* :func:`driver_logger` — the ``kestrel.run`` logger writing to ``graph/driver/output.log``
  (one file handler per run; removed when the run ends, so two runs in one process never
  write into each other's directories).
* :func:`ray_for_run` — start (or join) Ray unless it is running; shut it down afterwards only
  if this run started it.
* :func:`deploy_run` — a :class:`DeployedGraph` of the config with :class:`RunNodeWrapper`
  actors whose logs go to ``graph/<node>/output.log``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import ray

from .._deployed import DeployedGraph
from .._init import init_ray
from ._nodelog import RunNodeWrapper
from ._rundir import RunDir

__all__ = ["driver_logger", "ray_for_run", "deploy_run", "cluster_nodes", "LOGGER_NAME"]

LOGGER_NAME = "kestrel.run"
_FORMAT = "%(asctime)s %(levelname)s %(message)s"


@contextlib.contextmanager
def driver_logger(run: RunDir, *, console: bool = True) -> Iterator[logging.Logger]:
    """The driver logger of one run, writing to ``graph/driver/output.log`` (appending).

    Args:
        run: the run directory.
        console: also print ``INFO`` lines to stdout (plain messages).
    """
    log = logging.getLogger(LOGGER_NAME)
    log.setLevel(logging.INFO)
    log.propagate = False
    path = os.path.join(run.node_dir("driver"), "output.log")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
    handlers[0].setFormatter(logging.Formatter(_FORMAT))
    if console:
        stream = _StdoutHandler()
        stream.setFormatter(logging.Formatter("%(message)s"))
        handlers.append(stream)
    for handler in handlers:
        log.addHandler(handler)
    try:
        yield log
    finally:
        for handler in handlers:
            log.removeHandler(handler)
            handler.close()


class _StdoutHandler(logging.StreamHandler):
    """Writes to the *current* ``sys.stdout`` (which a live display may have redirected)."""

    def __init__(self) -> None:
        super().__init__()

    def emit(self, record: logging.LogRecord) -> None:
        import sys

        self.stream = sys.stdout
        super().emit(record)


@contextlib.contextmanager
def ray_for_run(address: str | None, ray_kwargs: Mapping[str, Any], log: logging.Logger | None = None
                ) -> Iterator[bool]:
    """Ray for the duration of a run; yields whether this run started it.

    Args:
        address: cluster address (``None``: ``RAY_ADDRESS`` or a local Ray).
        ray_kwargs: the config's ``ray`` section (``ray.init`` keyword arguments; an
            ``address`` there is used when ``address`` is ``None``).
        log: where to note what happened.
    """
    kwargs = dict(ray_kwargs)
    address = address or kwargs.pop("address", None)
    kwargs.pop("address", None)
    started = not ray.is_initialized()
    if started:
        init_ray(address, **kwargs)
        if log is not None:
            joined = address or os.environ.get("RAY_ADDRESS")
            log.info("ray: %s (%s)", f"joined {joined}" if joined else "started a local Ray", _resources())
    elif log is not None:
        log.info("ray: using the Ray already running in this process (%s)", _resources())
    try:
        yield started
    finally:
        if started:
            ray.shutdown()


def _resources() -> str:
    res = ray.cluster_resources()
    keys = ["CPU", "GPU"] + sorted(k for k in res if k not in ("CPU", "GPU", "memory", "object_store_memory")
                                   and not k.startswith("node:"))
    return ", ".join(f"{k} {res[k]:g}" for k in keys if k in res)


def deploy_run(config: Any, run: RunDir, *, seed: int | None, buffer: Any = None
               ) -> tuple[DeployedGraph, dict[str, list[str]]]:
    """Deploy the config's graph with :class:`RunNodeWrapper` actors logging into ``run``.

    Args:
        config: a :class:`kestrel_core.RunConfig`.
        run: its run directory.
        seed: the run's seed.
        buffer: the buffer rules for the store (``config.buffer`` for a launch, ``None`` to
            keep every sample).

    Returns:
        ``(deployed graph, {node: [Ray node id of each of its actors]})``; the caller shuts
        the graph down.

    Raises:
        As :meth:`DeployedGraph.deploy`.
    """
    dg = DeployedGraph(config.graph, seed=seed, run_dir=run.root, buffer=buffer)
    dg.wrapper_cls = RunNodeWrapper
    dg.deploy()
    try:
        refs = {name: [actor.open_log.remote(run.node_dir(name)) for actor in dg.handle(name).actors]
                for name in config.graph.nodes}
        placement = {name: [info["node_id"] for info in ray.get(r)] for name, r in refs.items()}
    except BaseException:
        dg.shutdown()
        raise
    return dg, placement


def cluster_nodes() -> dict[str, dict[str, float]]:
    """``{Ray node id: its resources}`` of the live nodes of the cluster."""
    return {n["NodeID"]: {k: v for k, v in n.get("Resources", {}).items() if not k.startswith("node:")}
            for n in ray.nodes() if n.get("Alive", True)}
