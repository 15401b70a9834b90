"""Where a launch's time goes: ``RUN/profile.json``, written at the end of every launch.

Three views of the same wall clock (seconds, and the share of the launch's wall time):

* ``driver``: the launch's parts in order — ``preflight`` (config, dry run, run directory),
  ``ray_start``, then one entry per :class:`~kestrel.controller._states.Phase`: ``starting``
  (deploying the actors, loading saved weights), ``initial simulation``, ``training`` (and
  ``stopping``), ``saving``, ``sampling`` (the posterior draws at the end);
* ``estimators``: per estimator node, where its training time went (the estimator's
  ``timings``, :mod:`kestrel_torch.train._timings`: ``steps``, ``batches``, ``validation``,
  ``cache_fill``, ``cache_sync``, ``refit``, ``epoch_end``), with ``steps_per_s`` (steps over
  the seconds of the steps alone) and ``epochs``;
* ``actors``: per node and replica, the seconds its actor was busy (``simulate``: the
  simulator's calls; ``sample_proposal``, ``sample_posterior``: an estimator's draws;
  ``inputs``: waiting for and reading the conditions' blocks, which includes the upstream
  nodes' work on them), with ``busy_share`` — ``simulate`` over the time
  simulations could run (``initial simulation`` + ``training`` + ``stopping``);
* ``cpu_s``: CPU seconds (user + system) — ``driver``: the launch's process from the actors'
  start to the end (each driver part from ``starting`` on has its own ``cpu_s`` too),
  ``driver_simulating``: of it, the parts during which simulations run, ``store``: the store
  actor's process over its life (``null`` when it did not answer). Kestrel's own cost of
  orchestrating the simulations, apart from the simulators'.

Timing is always on: a few clock reads per step, call and phase. The driver logs a one-line
summary; :func:`profile_rows` renders a profile as Markdown table rows (``python -m
kestrel.report._profile RUN``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from kestrel_core.internal import write_atomic

__all__ = ["PROFILE_FILE", "LaunchProfile", "write_profile", "profile_rows", "summary"]

#: the file in the run directory
PROFILE_FILE = "profile.json"
#: driver parts during which simulations run
_SIMULATING = ("initial simulation", "training", "stopping")


class LaunchProfile:
    """The driver's clock over one launch.

    Args:
        t_start: ``time.monotonic()`` when the launch began (the ``launch()`` call).

    Attributes:
        driver: part → seconds, in the order the parts began.
    """

    def __init__(self, t_start: float):
        self.t_start = float(t_start)
        self.driver: dict[str, float] = {}
        self._part: str | None = None
        self._since = self.t_start
        #: part → the driver process's CPU seconds (parts entered with :meth:`enter`)
        self.driver_cpu: dict[str, float] = {}
        self._cpu_since = time.process_time()

    def add(self, part: str, seconds: float) -> None:
        """Add ``seconds`` to ``part`` (a part measured elsewhere, e.g. before Ray ran)."""
        self.driver[part] = self.driver.get(part, 0.0) + max(0.0, float(seconds))

    def enter(self, part: str, now: float | None = None) -> None:
        """End the current part and begin ``part`` (``now``: ``time.monotonic()``)."""
        now = time.monotonic() if now is None else now
        cpu = time.process_time()
        if self._part is not None:
            self.add(self._part, now - self._since)
            self.driver_cpu[self._part] = (
                self.driver_cpu.get(self._part, 0.0) + cpu - self._cpu_since
            )
        self._part, self._since, self._cpu_since = part, now, cpu

    def build(
        self,
        statuses: dict[str, Any],
        estimators: list[str],
        store_cpu_s: float | None = None,
    ) -> dict[str, Any]:
        """The profile as plain containers (the current part ends now).

        Args:
            statuses: node → its actor's status, or a list of them (one per replica), as
                :meth:`~kestrel_ray.DeployedGraph.status` returns (empty: none answered).
            estimators: the estimator nodes.
            store_cpu_s: the store process's CPU seconds
                (:meth:`~kestrel_ray.DeployedGraph.store_cpu_seconds`; ``None``: unknown).
        """
        self.enter("", time.monotonic())
        self._part = None
        wall = max(sum(self.driver.values()), 1e-9)

        def share(seconds: float, of: float = wall) -> float:
            return round(seconds / of, 4) if of > 0 else 0.0

        out: dict[str, Any] = {
            "wall_s": round(wall, 3),
            "driver": {
                k: {"seconds": round(v, 3), "share": share(v)} for k, v in self.driver.items()
            },
            "estimators": {},
            "actors": {},
            "cpu_s": {
                "driver": round(sum(self.driver_cpu.values()), 3),
                "driver_simulating": round(
                    sum(self.driver_cpu.get(k, 0.0) for k in _SIMULATING), 3
                ),
                "store": None if store_cpu_s is None else round(float(store_cpu_s), 3),
            },
        }
        for k, v in self.driver_cpu.items():
            if k in out["driver"]:
                out["driver"][k]["cpu_s"] = round(v, 3)
        simulating = sum(self.driver.get(k, 0.0) for k in _SIMULATING)
        for node, status in statuses.items():
            if node.startswith("_"):
                continue
            replicas = status if isinstance(status, list) else [status]
            out["actors"][node] = [_actor(r, share, simulating) for r in replicas]
            if node in estimators and replicas:
                out["estimators"][node] = _estimator(replicas[0], share)
        return out


def _actor(
    status: dict[str, Any], share: Callable[..., float], simulating: float
) -> dict[str, Any]:
    seconds = dict(status.get("seconds") or {})
    return {
        "replica": int(status.get("replica", 0)),
        "busy": {k: {"seconds": round(v, 3), "share": share(v)} for k, v in seconds.items()},
        "busy_share": share(float(seconds.get("simulate", 0.0)), simulating),
        "samples": int(status.get("samples", 0)),
    }


def _estimator(status: dict[str, Any], share: Callable[..., float]) -> dict[str, Any]:
    est = dict(status.get("estimator") or {})
    timings = dict(est.get("timings") or {})
    parts = {
        k: {
            "seconds": round(v["seconds"], 3),
            "count": int(v["count"]),
            "share": share(v["seconds"]),
        }
        for k, v in timings.items()
    }
    steps = timings.get("steps") or {}
    rate = steps.get("count", 0) / steps["seconds"] if steps.get("seconds") else None
    return {
        "epochs": int(est.get("epoch") or 0),
        "steps_per_s": None if rate is None else round(rate, 2),
        "parts": parts,
    }


def write_profile(run_root: str, profile: dict[str, Any]) -> str:
    """Write ``profile`` to ``<run_root>/profile.json`` (atomically); returns the path.

    Raises:
        OSError: the file cannot be written.
    """
    path = os.path.join(run_root, PROFILE_FILE)
    write_atomic(path, json.dumps(profile, indent=1).encode("utf-8"), durable=False)
    return path


def summary(profile: dict[str, Any]) -> str:
    """One line: the driver's parts and each estimator's biggest parts, with shares."""
    parts = ", ".join(
        f"{k} {v['seconds']:.1f} s ({100 * v['share']:.0f} %)" for k, v in profile["driver"].items()
    )
    line = f"profile: {profile['wall_s']:.1f} s: {parts}"
    for node, est in profile["estimators"].items():
        top = sorted(est["parts"].items(), key=lambda kv: -kv[1]["seconds"])[:4]
        inner = ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in top)
        rate = est["steps_per_s"]
        line += f"; {node}: {inner or 'no training'}" + (f", {rate} steps/s" if rate else "")
    for node, replicas in profile["actors"].items():
        busy = [r["busy_share"] for r in replicas if "simulate" in r["busy"]]
        if busy:
            line += f"; {node} simulating {', '.join(f'{100 * b:.0f} %' for b in busy)}"
    return line


def profile_rows(profile: dict[str, Any]) -> list[str]:
    """Markdown table rows ``| part | seconds | share of wall |`` of a profile: the driver's
    parts, then each estimator's parts and each simulator replica's busy time."""
    rows = ["| part | seconds | share of wall |", "|---|---|---|"]
    for k, v in profile["driver"].items():
        rows.append(f"| {k} | {v['seconds']:.2f} | {100 * v['share']:.1f} % |")
    for node, est in profile["estimators"].items():
        for k, v in est["parts"].items():
            rows.append(f"| {node}: {k} | {v['seconds']:.2f} | {100 * v['share']:.1f} % |")
        rate = est["steps_per_s"]
        rows.append(f"| {node}: steps/s (steps alone) | {'—' if rate is None else rate} | |")
    for node, replicas in profile["actors"].items():
        for r in replicas:
            for k, v in r["busy"].items():
                if k == "inputs" and v["seconds"] < 0.01:
                    continue
                rows.append(
                    f"| {node} replica {r['replica']}: {k} | {v['seconds']:.2f} | "
                    f"{100 * v['share']:.1f} % |"
                )
    cpu = profile.get("cpu_s") or {}
    if cpu.get("driver") is not None:
        rows.append(f"| driver CPU (from the actors' start) | {cpu['driver']:.2f} | |")
    if cpu.get("store") is not None:
        rows.append(f"| store actor CPU | {cpu['store']:.2f} | |")
    rows.append(f"| **wall** | {profile['wall_s']:.2f} | 100 % |")
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m kestrel.report._profile RUN``: print RUN/profile.json as a Markdown table."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kestrel.report._profile RUN", file=sys.stderr)
        return 2
    path = os.path.join(args[0], PROFILE_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            profile = json.load(fh)
    except (OSError, ValueError) as err:
        print(f"cannot read {path}: {err}", file=sys.stderr)
        return 1
    print("\n".join(profile_rows(profile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
