"""The samples a launch draws when training is done: ``sample.posterior.n`` and ``sample.ppd.n``
(skipped, with a log line, while an estimator has no trained model).

The draws run in a thread of their own while the launch's main thread watches its stop
control: after a stop request (one that came before the sampling, or during it) they get
:data:`~kestrel.controller._stop.STOP_GRACE` seconds; draws not done then are skipped, with a
log line saying how to draw them later (``kestrel sample <mode> -o RUN``). Nothing of a
skipped draw is written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from kestrel.controller._states import RunStatus
from kestrel.controller._stop import StopControl
from kestrel.rundir._samplefiles import observation_digest
from kestrel.sample._guards import record, status_findings
from kestrel.sample._sampling import draw_samples, shapes_text
from kestrel_core import KestrelError, RunConfig
from kestrel_core.internal import SkipLog

if TYPE_CHECKING:
    from kestrel.rundir._rundir import RunDir
    from kestrel_ray import DeployedGraph

__all__ = ["sample_at_end", "sample_if_trained"]

T = TypeVar("T")


class _Skipped(Exception):
    """The draws did not finish within the grace after a stop request."""


def _until_stopped(fn: Callable[[], T], stop: StopControl | None, poll: float = 0.1) -> T:
    """``fn()`` in a thread of its own; its result, or its exception re-raised here.

    Raises:
        _Skipped: a stop was requested and ``fn`` was not done :attr:`StopControl.grace`
            seconds later (the thread is left to end with the actors it waits on).
    """
    if stop is None:
        return fn()
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as err:  # re-raised in the caller's thread
            out["error"] = err

    thread = threading.Thread(target=target, name="kestrel-final-samples", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll)
        if thread.is_alive() and stop.waited_enough():
            raise _Skipped
    if "error" in out:
        raise out["error"]
    return out["value"]


def sample_if_trained(
    dg: DeployedGraph,
    cfg: RunConfig,
    run: RunDir,
    status: RunStatus,
    log: logging.Logger,
    *,
    epochs: Mapping[str, int],
    max_epochs: Mapping[str, int],
    stop: StopControl | None = None,
) -> dict[str, str]:
    """:func:`sample_at_end`, unless an estimator node has no trained model (logged).

    Args:
        dg, cfg, run, status, log, stop: as :func:`sample_at_end`.
        epochs: node → epochs trained (the launch's result). max_epochs: node → the
            ``max_epochs`` ``--epochs`` set (others: the config's), for the log line.

    Returns:
        mode → the sample file written (empty: skipped).
    """
    untrained = [n for n in cfg.graph.latents if not epochs.get(n)]
    if untrained and status is not RunStatus.COMPLETED:
        log.info(
            "sampling: skipped; no trained model yet for %s (stopped before the first epoch)",
            ", ".join(repr(n) for n in untrained),
        )
        return {}
    untrained = [n for n in untrained if not run.has_weights(n)]
    if untrained:  # completed without one epoch (max_epochs: 0): nothing to sample from
        log.info(
            "sampling: skipped; no trained model for %s (training ended before the first "
            "epoch: max_epochs %s)",
            ", ".join(repr(n) for n in untrained),
            {n: _max_epochs(cfg, n, max_epochs) for n in untrained},
        )
        return {}
    return sample_at_end(dg, cfg, run, status, log, stop=stop)


def _max_epochs(cfg: RunConfig, node: str, max_epochs: Mapping[str, int]) -> Any:
    if node in max_epochs:
        return max_epochs[node]
    kwargs = getattr(cfg.graph[node].estimator, "kwargs", None)
    return kwargs.get("max_epochs") if isinstance(kwargs, dict) else None


def sample_at_end(
    dg: DeployedGraph,
    cfg: RunConfig,
    run: RunDir,
    status: RunStatus,
    log: logging.Logger,
    *,
    stop: StopControl | None = None,
) -> dict[str, str]:
    """Draw and write the configured posterior (and PPD) samples.

    Args:
        dg: the deployed graph. cfg: the run's config. run: its :class:`RunDir`.
        status: how the launch ended; a sampling error is raised only for ``completed``
            (a stopped launch logs it and goes on).
        log: the driver's logger.
        stop: the launch's stop control: after a stop request, draws not done within its
            grace are skipped (logged; ``None``: the draws are waited for).

    Returns:
        mode → the sample file written.

    Raises:
        KestrelError: sampling failed after a completed launch.
    """
    paths: dict[str, str] = {}
    for mode in ("posterior", "ppd"):
        entry = cfg.sample[mode]
        if not entry.n:
            if mode == "posterior":
                log.info("sampling: sample.posterior.n is not set; no posterior samples drawn")
            continue
        skipped = SkipLog()
        try:
            arrays = _until_stopped(
                partial(draw_samples, dg, mode, entry.n, entry, skipped=skipped), stop
            )
        except _Skipped:
            assert stop is not None
            log.warning(
                "sampling %s skipped: not done %g s after the stop (%s); draw the samples "
                "later with `kestrel sample %s -o %s`",
                mode,
                stop.grace,
                stop.reason,
                mode,
                run.root,
            )
            break
        except KestrelError as err:
            if status is RunStatus.COMPLETED:
                raise
            log.warning("sampling %s skipped: %s", mode, err)
            continue
        if skipped.errors:  # on_error: skip, as `kestrel sample` reports it
            log.warning("sampling %s: %s", mode, skipped.line(entry.n))
        paths[mode] = path = run.write_samples(mode, arrays)
        digest = observation_digest(cfg.graph.observations)
        record(run, path, mode, digest, status_findings(dg, cfg.graph.latents))
        log.info("sampling: %d %s samples → %s (%s)", entry.n, mode, path, shapes_text(arrays))
    return paths
