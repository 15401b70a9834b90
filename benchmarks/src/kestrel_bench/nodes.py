"""The many-node table: ``python -m kestrel_bench.nodes NODES.json``.

Reads the JSON that ``pytest --benchmark-json`` wrote for ``benchmarks/test_07_nodes.py``
(``hatch run bench:nodes``) and prints one Markdown row per (K nodes, R replicas): the
replicas on each worker node, the simulations, the replicas' busy share over the launch
(lowest and median), a median replica's idle seconds in it (of them, in the initial
simulation), the busy share of the rounds drawn after training ended (the steady state, from
the driver's log), the driver's and the store actor's CPU seconds per 1000 simulations, the
seconds simulations could run and the 1-minute load average before and after the launch;
then the CPU cores each kind of the cluster's processes used while every replica was up; then,
per K, the growth exponent of each cost per 1000 simulations in R (the least-squares slope of
``log cost`` on ``log R``, as :mod:`kestrel_bench._scaling` does for N): 0 — each simulation
costs the same whatever the replica count; 1 — the cost of a simulation grows in proportion
to R. Exit status 2 when the file cannot be read, else 0 (no floors: the targets are read off
the table).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ._scaling import _slope

__all__ = ["rows_from", "render", "render_cores", "growth", "render_growth", "main"]

#: busy share every replica should reach (issue 32 item 3)
BUSY_TARGET = 0.95

_HEAD = [
    "K nodes",
    "R replicas",
    "replicas a worker",
    "simulations",
    "busy share min / median",
    "idle s (initial sim.)",
    "busy after training",
    "driver CPU s / 1000 sims",
    "store CPU s / 1000 sims",
    "simulating s",
    "load 1 min before → after",
]


def rows_from(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``nodes`` benchmarks' rows (their ``extra_info``), sorted by K then R."""
    rows = [
        dict(b.get("extra_info") or {})
        for b in data.get("benchmarks", [])
        if (b.get("extra_info") or {}).get("group") == "nodes"
    ]
    return sorted(rows, key=lambda r: (int(r["nodes"]), int(r["replicas"])))


def _num(value: Any, digits: int = 3) -> str:
    return "—" if value is None else f"{float(value):.{digits}g}"


def _spread(row: dict[str, Any]) -> str:
    """Replicas on each worker node (``min–max``; the head's own actor left out), with a
    note when the store was not on the head."""
    counts = [int(v) for k, v in (row.get("placement") or {}).items() if str(k) != "0"]
    if not counts:
        return "—"
    text = f"{min(counts)}–{max(counts)}" if min(counts) != max(counts) else str(counts[0])
    return text if row.get("store_node") in ([0], None) else f"{text} (store not on the head)"


def render(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` (busy shares below :data:`BUSY_TARGET` in bold)."""
    lines = ["| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    for r in rows:
        low = float(r["busy_min"])
        busy = f"{low:.3f} / {float(r['busy_median']):.3f}"
        if low < BUSY_TARGET:
            busy = f"**{busy}**"
        cells = [
            str(r["nodes"]),
            str(r["replicas"]),
            _spread(r),
            str(r["simulations"]),
            busy,
            f"{float(r['idle_s']):.1f} ({float(r.get('initial_idle_s', 0.0)):.1f})",
            "—" if r.get("steady_busy") is None else f"{float(r['steady_busy']):.3f}",
            _num(r["driver_cpu_per_1000"]),
            _num(r["store_cpu_per_1000"]),
            f"{float(r['simulating_s']):.1f}",
            f"{float(r['load_before']):.2f} → {float(r['load_after']):.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


_KINDS = ("replicas", "driver", "store", "estimator", "raylets+gcs", "other Ray")


def render_cores(rows: Sequence[dict[str, Any]]) -> str:
    """CPU cores each kind of process used while every replica was up (the ``cores`` the
    benchmark sampled from ``/proc``), with the replicas' per replica in ms a second."""
    head = ["K", "R", *(f"{k} (cores)" for k in _KINDS), "a replica (ms/s)", "window s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cores = r.get("cores") or {}
        if not cores:
            continue
        each = 1000.0 * float(cores.get("replicas", 0.0)) / max(1, int(r["replicas"]))
        cells = [str(r["nodes"]), str(r["replicas"])]
        cells += [_num(cores.get(k), 2) for k in _KINDS]
        cells += [f"{each:.1f}", str(cores.get("window_s", "—"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def growth(rows: Sequence[dict[str, Any]]) -> list[tuple[int, tuple[int, ...], dict[str, Any]]]:
    """Per K measured at two or more R: ``(K, the R, {cost: exponent in R or None})``."""
    out = []
    for k in sorted({int(r["nodes"]) for r in rows}):
        mine = [r for r in rows if int(r["nodes"]) == k]
        sizes = tuple(sorted({int(r["replicas"]) for r in mine}))
        if len(sizes) < 2:
            continue
        out.append(
            (
                k,
                sizes,
                {
                    cost: _slope([(int(r["replicas"]), r[cost]) for r in mine])
                    for cost in ("driver_cpu_per_1000", "store_cpu_per_1000")
                },
            )
        )
    return out


def render_growth(rows: Sequence[dict[str, Any]]) -> str:
    """The exponents of each cost per 1000 simulations in R, as a Markdown table."""
    lines = [
        "| K nodes | R | driver CPU / 1000 sims ∝ R^a | store CPU / 1000 sims ∝ R^a |",
        "|---|---|---|---|",
    ]
    for k, sizes, exps in growth(rows):
        cells = [
            "—" if exps[c] is None else f"{exps[c]:+.2f}"
            for c in ("driver_cpu_per_1000", "store_cpu_per_1000")
        ]
        lines.append(f"| {k} | {', '.join(map(str, sizes))} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table and the exponents; return 0, or 2 when the file cannot be read."""
    parser = argparse.ArgumentParser(
        prog="python -m kestrel_bench.nodes", description=__doc__.splitlines()[0]
    )
    parser.add_argument("json", help="file written by pytest --benchmark-json (bench:nodes)")
    args = parser.parse_args(argv)
    try:
        with open(args.json, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as err:
        print(f"kestrel_bench.nodes: cannot read {args.json!r}: {err}", file=sys.stderr)
        return 2
    rows = rows_from(data)
    machine = data.get("machine_info", {})
    cpu = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor") or "?"
    print(
        f"Kestrel many-node benchmark — {data.get('datetime', '?')} — {cpu}, "
        f"{(machine.get('cpu') or {}).get('count', '?')} cores"
    )
    print(render(rows))
    if any(r.get("cores") for r in rows):
        print("\nCPU cores of the cluster's processes while every replica was up:")
        print(render_cores(rows))
    if growth(rows):
        print("\nGrowth of each cost per 1000 simulations with R (slope of log cost on log R):")
        print(render_growth(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
