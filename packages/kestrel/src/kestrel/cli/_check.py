"""The ``kestrel check`` sub-command, and its report lines.

::

    kestrel check calibration -o RUN [-n 200] [--samples 1000] [--from proposal|prior]
                  [--seed S] [--ray] [--address ADDR] [--no-image] [--trust] [key=value ...]

Ray and torch are imported only when the command runs (see :mod:`kestrel.check._calibrate`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

from kestrel.cli._arguments import non_negative_int, positive_int, trust_argument, user_path

if TYPE_CHECKING:
    from kestrel.check._calibrate import CalibrationResult
    from kestrel.cli._arguments import Subcommands

__all__ = ["check_command", "add_check_argument", "run_calibration", "summary_lines"]


def check_command(subparsers: Subcommands) -> None:
    """Register ``kestrel check`` and its checks (``calibration``)."""
    p = subparsers.add_parser(
        "check",
        help="check a trained run (calibration of its posterior)",
        description="Checks of a trained run; each writes its report to RUN/checks/.",
    )
    checks = p.add_subparsers(dest="check", metavar="CHECK", required=True)
    c = checks.add_parser(
        "calibration",
        help="coverage of the posterior on simulations around the observation",
        description="Draw N parameter sets from the run's final proposal (or --from prior), "
        "simulate their data through the run's graph, draw --samples posterior samples for each "
        "in batched calls, and compute the expected coverage of highest-density regions at "
        "levels 0.05..0.95 (Hermans et al. 2022) with a simultaneous binomial band, SBC ranks "
        "per component (Talts et al. 2018) and TARP (Lemos et al. 2023). Writes "
        "RUN/checks/calibration.json (levels, coverage, max_deviation, verdict: calibrated, "
        "overconfident or underconfident) and RUN/checks/calibration.png. Simulations run in "
        "this process unless --ray, --address, ray.address or num_actors > 1 ask for Ray; the "
        "posterior draws always run here.",
    )
    c.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="RUN", help="run directory"
    )
    c.add_argument(
        "-n",
        type=positive_int,
        default=200,
        metavar="N",
        help="simulations to check on (default: %(default)s; the band's half-width is about "
        "1.5/sqrt(N) at level 0.5)",
    )
    c.add_argument(
        "--samples",
        type=positive_int,
        default=1000,
        metavar="L",
        help="posterior draws per simulation (default: %(default)s)",
    )
    c.add_argument(
        "--from",
        dest="source",
        choices=("proposal", "prior"),
        default="proposal",
        help="where the true parameters come from: the final proposal at the run's observation "
        "(a local check, default) or the prior (for an amortized estimator)",
    )
    c.add_argument(
        "--seed", type=non_negative_int, default=None, help="seed (default: fresh entropy)"
    )
    c.add_argument("--address", default=None, metavar="ADDR", help="simulate on this Ray cluster")
    c.add_argument(
        "--ray", action="store_true", help="simulate on Ray (a local Ray, or RAY_ADDRESS)"
    )
    c.add_argument(
        "--no-image", dest="image", action="store_false", help="do not draw calibration.png"
    )
    trust_argument(c)
    c.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (not saved)")
    c.set_defaults(func=_run_check)


def add_check_argument(parser: argparse.ArgumentParser) -> None:
    """``--check`` of ``kestrel launch``: check calibration after training."""
    parser.add_argument(
        "--check",
        action="store_true",
        help="after training, run `kestrel check calibration -o RUN` (defaults: 200 "
        "simulations from the final proposal, 1000 posterior draws each)",
    )


def _run_check(args: argparse.Namespace) -> int:
    result = run_calibration(
        args.output,
        n=args.n,
        samples=args.samples,
        source=args.source,
        seed=args.seed,
        overrides=args.overrides,
        address=args.address,
        ray=True if args.ray else None,
        image=args.image,
        trust=args.trust,
    )
    for text in result.skipped.warnings("kestrel check calibration"):  # on_error: skip
        print(text, file=sys.stderr)
    for line in summary_lines(result):
        print(line)
    return 0


def run_calibration(run_dir: str | os.PathLike[str], **kwargs: Any) -> CalibrationResult:
    """:func:`~._calibrate.check_calibration` (imported here, with Ray and torch)."""
    from kestrel.check._calibrate import check_calibration

    return check_calibration(run_dir, **kwargs)


def summary_lines(result: CalibrationResult) -> list[str]:
    """What ``kestrel check calibration`` prints about a :class:`~._calibrate.CalibrationResult`."""
    report = result.report
    where = "on Ray" if result.ray else "in this process"
    lines = [
        f"kestrel check calibration: {result.verdict} — HPD coverage off its level by at most "
        f"{result.max_deviation:.3f} ({len(report['levels'])} levels; "
        f"n={result.n} simulations from the {result.source} {where}, {result.samples} "
        f"posterior draws each, seed {result.seed}, {result.wall_time:.1f} s)",
        f"  TARP: {report['tarp']['verdict']} (max deviation {report['tarp']['max_deviation']:.3f})",
    ]
    ranks = report["ranks"]
    parts = [
        f"{name} {verdict} ({dev:.3f})"
        for name, verdict, dev in zip(ranks["names"], ranks["verdict"], ranks["max_deviation"])
    ]
    lines.append("  marginal (SBC ranks): " + (", ".join(parts) or "none"))
    if report.get("fixed"):
        fixed = ", ".join(f"{f['name']} = {f['value']:g}" for f in report["fixed"])
        lines.append(f"  fixed (constant, left out of ranks and TARP): {fixed}")
    from kestrel_core.internal import SkipLog

    if report.get("skipped"):  # on_error: skip
        lines.append(f"  {SkipLog(dict(report['skipped'])).line()}")
    if report.get("dropped"):
        lines.append(f"  {report['dropped']} simulations with non-finite values dropped")
    lines.append(f"  report: {result.path}")
    if result.image:
        lines.append(f"  figure: {result.image}")
    elif importlib.util.find_spec("matplotlib") is None:
        lines.append("  (no figure: pip install 'kestrel[plot]' for calibration.png)")
    return lines
