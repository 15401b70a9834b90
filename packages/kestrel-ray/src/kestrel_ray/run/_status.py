"""What a launch writes to ``RUN/status.json`` at every poll and at each phase change."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["launch_status"]


def launch_status(launcher: Any) -> dict[str, Any]:
    """The status of a :class:`~kestrel_ray.run._launcher.Launcher` as plain containers.

    Keys: ``status``, ``reason``, ``seed``, ``resumed``, ``restored`` (the buffer counts put
    back), ``epochs``, ``samples``, ``simulated`` (valid rows kept), ``nonfinite``, ``errors``,
    ``restarts``, ``observation_checks`` (kept from the file: what sampling recorded),
    ``budget`` (``total``, ``used``, ``invalid``, ``left``), ``rounds`` (resimulation rounds
    drawn), ``deterministic``, ``buffer`` (the store's counts), ``wall_time`` (s),
    ``placement``, ``cluster``, ``updated`` (local time).
    """
    r, run = launcher.result, launcher.session.run
    restored = launcher.resume.restored
    return {
        "status": r.status,
        "reason": r.reason,
        "seed": r.seed,
        "resumed": r.resumed,
        "restored": restored.counts() if restored else None,
        "epochs": r.epochs,
        "samples": r.samples,
        "simulated": r.simulated,
        "nonfinite": r.nonfinite,
        "errors": r.errors,
        "restarts": r.restarts,
        "observation_checks": run.read_status().get("observation_checks") or {},
        "budget": launcher.budget.as_status(),
        "rounds": launcher.resim.drawn if launcher.resim is not None else 0,
        "deterministic": launcher.deterministic,
        "buffer": launcher.stats,
        "wall_time": round(time.monotonic() - launcher.t0, 3),
        "placement": r.placement,
        "cluster": launcher.cluster,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
