"""Growth exponents: how each benchmarked cost grows with N, from the gate's rows.

For every group, device and baseline measured at two or more N, the exponent ``a`` of
``time ∝ N^a`` is the least-squares slope of ``log(median)`` on ``log(N)`` — for Kestrel's
median and for the baseline's. ``a ≈ 1``: linear in the samples; ``a ≈ 0``: independent of N
(a fixed cost dominates); ``a > 1``: worse than linear. Kestrel's exponent spans every N its
benchmark ran at; a baseline skipped at the large N (too slow to run) gets its exponent over the
N it ran at, and the table names that range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Exponent", "exponents", "render_exponents"]


@dataclass(frozen=True)
class Exponent:
    """The growth of one group's cost: ``kestrel`` over ``sizes`` (every N Kestrel ran at),
    ``baseline`` over ``baseline_sizes`` (the N this baseline ran at); ``None`` where fewer than
    two sizes have that side measured."""

    group: str
    device: str
    baseline_name: str
    sizes: tuple[int, ...]
    kestrel: float | None
    baseline: float | None
    baseline_sizes: tuple[int, ...] = ()


def _slope(points: Sequence[tuple[int, float]]) -> float | None:
    """Least-squares slope of ``log t`` on ``log n`` over ``(n, t)`` with distinct n, t > 0."""
    pts = [(math.log(n), math.log(t)) for n, t in points if n > 0 and t and t > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def exponents(rows: Sequence[Any]) -> list[Exponent]:
    """One :class:`Exponent` per (group, device, baseline) measured at two or more N.

    Args:
        rows: the gate's rows (:class:`kestrel_bench.gate.Row`); rows of interleaved rounds
            (a paired ratio) are left out: they repeat the group's own medians. An N where
            Kestrel ran without a baseline (a ``(missing)`` row) counts for Kestrel's exponent.
    """
    kestrel: dict[tuple[str, str], dict[int, float | None]] = {}
    series: dict[tuple[str, str, str], dict[int, float | None]] = {}
    for r in rows:
        if r.paired_ratio is None:
            kestrel.setdefault((r.group, r.device), {})[r.n] = r.kestrel_s
            if r.baseline_s is not None:
                series.setdefault((r.group, r.device, r.baseline_name), {})[r.n] = r.baseline_s
    for group, device in kestrel:  # Kestrel measured, no baseline anywhere
        if not any(k[:2] == (group, device) for k in series):
            series[(group, device, "(missing)")] = {}
    out = []
    for (group, device, name), base in series.items():
        points = kestrel[(group, device)]
        sizes = tuple(sorted(n for n, t in points.items() if t))
        baseline_sizes = tuple(sorted(base))
        if len(sizes) < 2 and len(baseline_sizes) < 2:
            continue
        out.append(
            Exponent(
                group,
                device,
                name,
                sizes or baseline_sizes,
                _slope([(n, t) for n, t in points.items() if t]),
                _slope(list(base.items())),
                baseline_sizes,
            )
        )
    return out


def render_exponents(items: Sequence[Exponent], *, markdown: bool = False) -> str:
    """The exponents as aligned text or a Markdown table."""
    head = ["group", "N", "Kestrel ∝ N^a", "baseline ∝ N^b"]
    body = []
    for e in items:
        name = e.group if e.device == "cpu" else f"{e.group}[{e.device}]"
        body.append(
            [
                f"{name} vs {e.baseline_name}",
                f"{e.sizes[0]}–{e.sizes[-1]}",
                "—" if e.kestrel is None else f"a = {e.kestrel:.2f}",
                _baseline_cell(e),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head).rstrip(), "  ".join("-" * w for w in widths)]
    return "\n".join(lines + [fmt.format(*row).rstrip() for row in body])


def _baseline_cell(e: Exponent) -> str:
    if e.baseline is None:
        return "—"
    cell = f"b = {e.baseline:.2f}"
    if e.baseline_sizes and e.baseline_sizes != e.sizes:
        cell += f" ({e.baseline_sizes[0]}–{e.baseline_sizes[-1]})"
    return cell
