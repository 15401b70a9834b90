"""Ray for a run: start or join it for one command (shipping the run's code to a cluster),
shut it down afterwards only if the command started it, and what the cluster's nodes hold.

:meth:`~kestrel.session._session.RunSession.ray` uses :func:`ray_for_run` with the config's
``ray`` section; the launcher records :func:`cluster_nodes` in ``status.json``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ray

from kestrel.session._code import code_runtime_env
from kestrel_ray import init_ray

__all__ = ["ray_for_run", "cluster_nodes"]


@contextlib.contextmanager
def ray_for_run(
    address: str | None,
    ray_kwargs: Mapping[str, Any],
    log: logging.Logger | None = None,
    *,
    imports: Sequence[str] = (),
    run_dir: str | None = None,
    log_to_driver: bool = True,
) -> Iterator[bool]:
    """Ray for the duration of a run; yields whether this run started it.

    Joining a cluster ships the run's code with Ray's runtime environment
    (:func:`~kestrel.session._code.code_runtime_env`); a local Ray imports it from where it is.

    Args:
        address: cluster address (``None``: ``RAY_ADDRESS`` or a local Ray).
        ray_kwargs: the config's ``ray`` section (``ray.init`` keyword arguments; an
            ``address`` there is used when ``address`` is ``None``).
        log: where to note what happened.
        imports: the config's ``paths.imports`` (the first is the config's folder).
        run_dir: the run directory (never shipped).
        log_to_driver: Ray's forwarding of the actors' stdout and stderr to this process (a
            launch, whose actors' output goes to their ``output.log``, turns it off; the
            config's ``ray.log_to_driver`` has the last word).

    Raises:
        ClusterError: Ray could not be joined (see :func:`~kestrel_ray.init_ray`).
    """
    kwargs = dict(ray_kwargs)
    source = "--address" if address else "ray.address (config)"
    address = address or kwargs.pop("address", None)
    kwargs.pop("address", None)
    kwargs.setdefault("log_to_driver", log_to_driver)
    started = not ray.is_initialized()
    if started:
        if address or os.environ.get("RAY_ADDRESS"):
            runtime_env, warnings = code_runtime_env(
                imports, run_dir, kwargs.pop("runtime_env", None)
            )
            if runtime_env:
                kwargs["runtime_env"] = runtime_env
            for message in warnings:
                if log is not None:
                    log.warning("%s", message)
        init_ray(address, source=source, **kwargs)
        if log is not None:
            joined = address or os.environ.get("RAY_ADDRESS")
            log.info(
                "ray: %s (%s)",
                f"joined {joined}" if joined else "started a local Ray",
                _resources(),
            )
    elif log is not None:
        log.info("ray: using the Ray already running in this process (%s)", _resources())
    try:
        yield started
    finally:
        if started:
            ray.shutdown()


def _resources() -> str:
    res = ray.cluster_resources()
    keys = ["CPU", "GPU"] + sorted(
        k
        for k in res
        if k not in ("CPU", "GPU", "memory", "object_store_memory") and not k.startswith("node:")
    )
    return ", ".join(f"{k} {res[k]:g}" for k in keys if k in res)


def cluster_nodes() -> dict[str, dict[str, float]]:
    """``{Ray node id: its resources}`` of the live nodes of the cluster."""
    return {
        n["NodeID"]: {k: v for k, v in n.get("Resources", {}).items() if not k.startswith("node:")}
        for n in ray.nodes()
        if n.get("Alive", True)
    }
