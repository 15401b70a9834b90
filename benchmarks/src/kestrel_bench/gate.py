"""The ratio gate: ``python -m kestrel_bench.gate BENCHMARK.json [--markdown] [--report]``.

Reads the JSON that ``pytest --benchmark-json`` wrote for the suites in ``benchmarks/``, pairs
every baseline with Kestrel's benchmark of the same group, N and device (from the
``extra_info`` that :func:`kestrel_bench.label` wrote), and prints one table: group, N,
baseline, Kestrel, ratio (baseline median / Kestrel median — for ``training`` that is Kestrel's
steps/s over the baseline's), the ratio the original design published, and the floor; then
the growth exponent of each cost in N (:mod:`kestrel_bench._scaling`).

Floors apply on the CPU at N = 1024 (at the group's only N where it has one size); every
other row is reported. Medians only: one slow round on a shared machine does not fail the gate.
Where Kestrel's benchmark ran interleaved baseline rounds (``extra_info["paired"]``, the
``training`` group), the gated ratio is the median of the per-round ratios.
``sync`` is gated on Kestrel's absolute blocking time, every other group on its ratio. The exit
status is 1 when a floor is missed or a gated benchmark is missing (e.g. it failed), 2 when the
file cannot be read, else 0. ``--report`` prints the same table and exponents without applying
any floor (exit 0 unless the file cannot be read): for runs that are not the gate's, such as
``bench:scale`` (N = 8192–65 536, ``benchmarks/test_06_scale.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._data import GATE_N
from ._scaling import exponents, render_exponents

__all__ = ["Floor", "FLOORS", "PUBLISHED", "Row", "rows_from", "missing_groups", "render", "main"]


@dataclass(frozen=True)
class Floor:
    """A group's gate: ``ratio`` ≥ value, or Kestrel's median ≤ ``max_seconds``."""

    ratio: float | None = None
    max_seconds: float | None = None

    def passes(self, ratio: float, kestrel_s: float) -> bool:
        if self.max_seconds is not None:
            return kestrel_s <= self.max_seconds
        return ratio >= (self.ratio or 0.0)

    def __str__(self) -> str:
        if self.max_seconds is not None:
            return f"Kestrel ≤ {_time(self.max_seconds)}"
        return f"≥ {self.ratio:g}×"


#: the issue's floors (gated groups must be present in the JSON)
FLOORS: dict[str, Floor] = {
    "resolve": Floor(ratio=50),
    "store": Floor(ratio=30),
    "fetch": Floor(ratio=10),
    "apply_fetch": Floor(ratio=20),
    "sync": Floor(max_seconds=5e-3),
    "training": Floor(ratio=0.85),
    "training_flow": Floor(ratio=0.85),
}
#: what ORIGIN.md published for the same step ("before → after" of the original fix)
PUBLISHED: dict[str, str] = {
    "resolve": "~280× (280 ms → ~1 ms)",
    "store": "~1.4× (140 → ~100 ms, thread pool)",
    "fetch": "—",
    "apply_fetch": "20× (4.0 → 0.2 s)",
    "sync": "18× (5.3 s → 0.3 s)",
    "fill": "12.7× on H200 (71 → 5.6 ms)",
    "sample_batch": "— (74 µs after, H200)",
    "training": "— (GPU 30–70 % busy)",
    "training_flow": "—",
}
ORDER = [
    "resolve",
    "resolve_cold",
    "store",
    "fetch",
    "fetch_spill",
    "fill",
    "apply_fetch",
    "sync",
    "sample_batch",
    "memory_fetch",
    "training",
    "training_flow",
]


@dataclass
class Row:
    """One baseline paired with Kestrel's benchmark."""

    group: str
    device: str
    n: int
    baseline_name: str
    baseline_s: float | None
    kestrel_s: float | None
    steps: int | None = None  # training: steps per round
    paired_ratio: float | None = None  # median of per-round ratios of interleaved rounds
    gated: bool = False
    floor: Floor | None = None

    @property
    def ratio(self) -> float | None:
        if self.paired_ratio is not None:
            return self.paired_ratio
        if not self.baseline_s or not self.kestrel_s:
            return None
        return self.baseline_s / self.kestrel_s

    @property
    def ok(self) -> bool:
        if not self.gated or self.floor is None:
            return True
        if self.ratio is None or self.kestrel_s is None:
            return False
        return self.floor.passes(self.ratio, self.kestrel_s)


def rows_from(data: dict[str, Any]) -> list[Row]:
    """The table's rows from pytest-benchmark's JSON (benchmarks without gate labels are ignored)."""
    entries: dict[tuple[str, str, int], dict[str, Any]] = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if "group" not in info or "role" not in info or not bench.get("stats"):
            continue
        key = (info["group"], info.get("device", "cpu"), int(info["n"]))
        slot = entries.setdefault(
            key, {"kestrel": None, "baselines": [], "steps": info.get("steps"), "paired": None}
        )
        median = float(bench["stats"]["median"])
        if info["role"] == "kestrel":
            slot["kestrel"] = median
            slot["paired"] = info.get("paired") or None
        else:
            slot["baselines"].append((info.get("baseline", "baseline"), median))
    rows: list[Row] = []
    for (group, device, n), slot in entries.items():
        for name, median in slot["baselines"] or [("(missing)", None)]:
            rows.append(Row(group, device, n, name, median, slot["kestrel"], slot["steps"]))
        if slot["paired"]:
            pairs = [(float(b), float(k)) for b, k in slot["paired"] if b > 0 and k > 0]
            if pairs:
                rows.append(
                    Row(
                        group,
                        device,
                        n,
                        "interleaved rounds",
                        statistics.median(b for b, _ in pairs),
                        statistics.median(k for _, k in pairs),
                        slot["steps"],
                        paired_ratio=statistics.median(b / k for b, k in pairs),
                    )
                )
    # gate: CPU rows at GATE_N, or at every N of a group that has no GATE_N row; where a group
    # has interleaved rounds, those rows (robust to drifting load) are the gated ones
    for group, floor in FLOORS.items():
        cpu = [r for r in rows if r.group == group and r.device == "cpu"]
        cpu = [r for r in cpu if r.paired_ratio is not None] or cpu
        at = [r for r in cpu if r.n == GATE_N] or cpu
        for r in at:
            r.gated, r.floor = True, floor
    rank = {g: i for i, g in enumerate(ORDER)}
    rows.sort(
        key=lambda r: (
            rank.get(r.group, len(ORDER)),
            r.group,
            r.device != "cpu",
            r.device,
            r.n,
            r.baseline_name,
        )
    )
    return rows


def missing_groups(rows: Sequence[Row]) -> list[str]:
    """Gated groups with no complete CPU row (baseline and Kestrel both measured)."""
    out = []
    for group in FLOORS:
        if not any(r.gated and r.group == group and r.ratio is not None for r in rows):
            out.append(group)
    return out


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale or unit == "µs":
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def _cell(row: Row, seconds: float | None) -> str:
    if row.steps and seconds:
        return f"{row.steps / seconds:.1f} steps/s"
    return _time(seconds)


def render(rows: Sequence[Row], *, markdown: bool = False) -> str:
    """The table as text (aligned columns) or as a Markdown table."""
    head = ["group", "N", "baseline", "Kestrel", "ratio", "original (published)", "floor", ""]
    body = []
    multi = {
        (r.group, r.device, r.n)
        for r in rows
        if sum((s.group, s.device, s.n) == (r.group, r.device, r.n) for s in rows) > 1
    }
    for r in rows:
        name = r.group if r.device == "cpu" else f"{r.group}[{r.device}]"
        if (r.group, r.device, r.n) in multi:
            name += f" vs {r.baseline_name}"
        ratio = (
            "—" if r.ratio is None else f"{r.ratio:,.0f}×" if r.ratio >= 1000 else f"{r.ratio:.3g}×"
        )
        floor = str(r.floor) if r.gated and r.floor is not None else "—"
        status = ("ok" if r.ok else "FAIL") if r.gated else ""
        body.append(
            [
                name,
                str(r.n),
                _cell(r, r.baseline_s),
                _cell(r, r.kestrel_s),
                ratio,
                PUBLISHED.get(r.group, "—"),
                floor,
                status,
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head[:-1] + ["gate"]) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c or " " for c in row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'>' if i in (1, 2, 3, 4) else '<'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*head).rstrip(), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*row).rstrip() for row in body]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; return the exit status (0 pass, 1 a floor missed/missing, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m kestrel_bench.gate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("json", help="file written by pytest --benchmark-json")
    parser.add_argument(
        "--markdown", action="store_true", help="print a Markdown table (for RESULTS.md)"
    )
    parser.add_argument(
        "--report", action="store_true", help="apply no floor: print the table and exponents only"
    )
    args = parser.parse_args(argv)
    try:
        with open(args.json, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as err:
        print(f"kestrel_bench.gate: cannot read {args.json!r}: {err}", file=sys.stderr)
        return 2
    rows = rows_from(data)
    if args.report:
        for r in rows:
            r.gated, r.floor = False, None
    machine = data.get("machine_info", {})
    cpu = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor") or "?"
    print(
        f"Kestrel benchmark gate — {data.get('datetime', '?')} — {cpu}, "
        f"{(machine.get('cpu') or {}).get('count', '?')} cores — medians; "
        + ("report only, no floors" if args.report else f"floors at N={GATE_N} on the CPU")
    )
    print(render(rows, markdown=args.markdown))
    growth = exponents(rows)
    if growth:
        print("\nGrowth of each cost with N (least-squares slope of log time on log N):")
        print(render_exponents(growth, markdown=args.markdown))
    if args.report:
        return 0
    failed = [r for r in rows if not r.ok]
    missing = missing_groups(rows)
    for r in failed:
        print(
            f"FAIL {r.group} N={r.n} vs {r.baseline_name}: ratio {r.ratio and f'{r.ratio:.3g}'}×, "
            f"Kestrel {_time(r.kestrel_s)}; floor {r.floor}",
            file=sys.stderr,
        )
    for group in missing:
        print(
            f"FAIL {group}: no complete CPU measurement (did its benchmarks fail or get skipped?)",
            file=sys.stderr,
        )
    if failed or missing:
        return 1
    print(f"gate passed: {sum(r.gated for r in rows)} gated rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
