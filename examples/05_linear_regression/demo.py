"""Demo: launch example 05 on a local Ray, sample the posterior, compare with the analytic one.

    hatch run demo                     # or: python examples/05_linear_regression/demo.py
    hatch run demo -- -o runs/demo --seed 3 --timeout 300 graph.theta.estimator.max_epochs=100

Without ``-o`` the run goes to a temporary directory that is removed when the demo exits.

Prints one row per parameter: posterior mean, analytic mean, their difference in posterior-σ
units, posterior σ, analytic σ and their ratio. Exits with status 1 when a mean is off by more
than 0.1 σ or a σ ratio leaves [0.9, 1.1] (the targets of DESIGN.md §4), 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MEAN_TOL = 0.1  # |posterior mean - analytic mean| / analytic σ
RATIO_RANGE = (0.9, 1.1)  # posterior σ / analytic σ


def compare(theta: np.ndarray, mean: np.ndarray, std: np.ndarray) -> tuple[list[str], bool]:
    """Table lines and whether every dimension meets the targets.

    Args:
        theta: posterior samples, float64 ``(n, D)``. mean, std: analytic, ``(D,)``.
    """
    m, s = theta.mean(0), theta.std(0, ddof=1)
    err, ratio = (m - mean) / std, s / std
    lines = [
        f"{'':>9} {'mean':>10} {'analytic':>10} {'err/σ':>7} {'σ':>10} {'analytic σ':>10} {'ratio':>6}"
    ]
    ok = True
    for i in range(len(mean)):
        good = abs(err[i]) <= MEAN_TOL and RATIO_RANGE[0] <= ratio[i] <= RATIO_RANGE[1]
        ok &= bool(good)
        lines.append(
            f"theta[{i}] {m[i]:10.5f} {mean[i]:10.5f} {err[i]:7.3f} {s[i]:10.6f} {std[i]:10.6f} "
            f"{ratio[i]:6.3f}{'' if good else '  ✗'}"
        )
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        help="run directory (default: a temporary one, removed at exit)",
    )
    parser.add_argument("--seed", type=int, default=0, help="run seed (default: %(default)s)")
    parser.add_argument(
        "--timeout", type=float, default=None, help="stop training after this many seconds"
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)

    if args.output:
        return demo(args, args.output)
    # no -o: a temporary run directory, removed at exit (also on an error or Ctrl-C)
    with tempfile.TemporaryDirectory(prefix="kestrel-demo-05-") as run_dir:
        return demo(args, run_dir, temporary=True)


def demo(args: argparse.Namespace, run_dir: str, temporary: bool = False) -> int:
    """Launch into ``run_dir``, print the comparison table; the exit status."""
    from kestrel import launch

    result = launch(
        HERE / "config.yml", run_dir, overrides=args.overrides, seed=args.seed, timeout=args.timeout
    )
    with np.load(result.samples["posterior"]) as data:
        theta = data["theta"]
    with np.load(HERE / "data" / "obs.npz") as obs:
        mean, std = obs["posterior_mean"], np.sqrt(np.diag(obs["posterior_cov"]))
    lines, ok = compare(theta, mean, std)
    print()
    print(
        f"example 05: {len(theta)} posterior samples after {result.epochs['theta']} epochs, "
        f"{result.simulated} simulations, {result.wall_time:.0f} s ({result.status}); run {result.run_dir}"
        + (" (temporary, removed at exit; -o DIR keeps it)" if temporary else "")
    )
    print("\n".join(lines))
    verdict = "within" if ok else "OUTSIDE"
    print(
        f"\n{verdict} the targets: |mean error| ≤ {MEAN_TOL} σ and σ ratio in "
        f"[{RATIO_RANGE[0]}, {RATIO_RANGE[1]}] in every dimension"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
