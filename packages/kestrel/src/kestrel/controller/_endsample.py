"""The samples a launch draws when training is done: ``sample.posterior.n`` and ``sample.ppd.n``."""

from __future__ import annotations

import logging
from typing import Any

from kestrel.controller._states import RunStatus
from kestrel.rundir._samplefiles import observation_digest
from kestrel.sample._guards import record, status_findings
from kestrel.sample._sampling import draw_samples, shapes_text
from kestrel_core import KestrelError, RunConfig
from kestrel_core.internal import SkipLog

__all__ = ["sample_at_end"]


def sample_at_end(
    dg: Any, cfg: RunConfig, run: Any, status: RunStatus, log: logging.Logger
) -> dict[str, str]:
    """Draw and write the configured posterior (and PPD) samples.

    Args:
        dg: the deployed graph. cfg: the run's config. run: its :class:`RunDir`.
        status: how the launch ended; a sampling error is raised only for ``completed``
            (a stopped launch logs it and goes on).
        log: the driver's logger.

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
        try:
            arrays = draw_samples(dg, mode, entry.n, entry, skipped=(skipped := SkipLog()))
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
