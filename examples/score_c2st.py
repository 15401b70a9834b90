"""Score a reference-task example (07, 08, 09) by C2ST against its reference posterior samples.

    python examples/score_c2st.py 07_two_moons -o runs/07 --seed 1     # launch, sample, score
    python examples/score_c2st.py 07_two_moons -o runs/07 --score-only # score the newest sample
    python examples/score_c2st.py 08_slcp --seed 2 graph.theta.estimator.max_epochs=50
    python examples/score_c2st.py 07_two_moons --config amortized.yml   # another config file
    python examples/score_c2st.py 09_gaussian_linear -o runs/09 --score-only --early-stopping

Launches ``examples/<task>/config.yml`` (or ``--config NAME`` of that folder) into the run directory (a temporary one without ``-o``,
removed at exit), then compares the run's newest posterior sample file with
``examples/<task>/data/obs.npz['reference_samples']`` by :func:`kestrel_core.c2st` (the
benchmark's classifier two-sample test: 0.5 is perfect, 1.0 fully separable; both sets are cut
to the same number of samples, at most ``--n``). Prints one line: task, seed, simulations,
epochs, launch wall time, C2ST and the time C2ST took. Needs
``pip install 'kestrel-core[diagnostics]'`` (scikit-learn).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TASKS = ("07_two_moons", "08_slcp", "09_gaussian_linear")


def score(
    task: str,
    posterior_file: str | Path,
    n: int = 10_000,
    seed: int = 1,
    early_stopping: bool = False,
) -> float:
    """C2ST of the ``theta`` samples in ``posterior_file`` against the task's reference
    (``early_stopping``: sbi's classifier variant, see :func:`kestrel_core.c2st`)."""
    from kestrel_core import c2st

    with np.load(posterior_file) as data:
        theta = data["theta"]
    with np.load(HERE / task / "data" / "obs.npz") as obs:
        reference = obs["reference_samples"]
    n = min(n, len(theta), len(reference))
    return c2st(reference[:n], theta[:n], seed=seed, early_stopping=early_stopping)


def newest_posterior(run_dir: str | Path) -> Path:
    """The newest posterior sample file of a run (any observation folder)."""
    files = sorted(
        Path(run_dir).glob("samples/posterior/*/0*.npz"), key=lambda p: p.stat().st_mtime
    )
    if not files:
        raise FileNotFoundError(f"{run_dir}: no posterior samples")
    return files[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=TASKS)
    parser.add_argument("-o", "--output", default=None, help="run directory (default: temporary)")
    parser.add_argument("--seed", type=int, default=1, help="run seed (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=None, help="stop training after SEC s")
    parser.add_argument("--n", type=int, default=10_000, help="samples per set (default: 10000)")
    parser.add_argument("--score-only", action="store_true", help="score the run as it is")
    parser.add_argument(
        "--config",
        default="config.yml",
        help="config file of the task's folder (default: %(default)s)",
    )
    parser.add_argument(
        "--early-stopping",
        action="store_true",
        help="sbi's C2ST classifier (stops early; minutes, not an hour, in 10-D)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_intermixed_args(argv)
    if args.score_only:
        if not args.output:
            parser.error("--score-only needs -o RUN")
        return report(args, args.output, None)
    if args.output:
        return report(args, args.output, launch_task(args, args.output))
    with tempfile.TemporaryDirectory(prefix=f"kestrel-{args.task}-") as run_dir:
        return report(args, run_dir, launch_task(args, run_dir))


def launch_task(args: argparse.Namespace, run_dir: str) -> str:
    """Launch the task into ``run_dir``; a one-line summary of the launch."""
    from kestrel import launch

    result = launch(
        HERE / args.task / args.config,
        run_dir,
        overrides=args.overrides,
        seed=args.seed,
        timeout=args.timeout,
    )
    return (
        f"{result.simulated} simulations, {result.epochs['theta']} epochs, "
        f"launch {result.wall_time:.0f} s ({result.status})"
    )


def report(args: argparse.Namespace, run_dir: str, launched: str | None) -> int:
    start = time.monotonic()
    value = score(
        args.task, newest_posterior(run_dir), n=args.n, early_stopping=args.early_stopping
    )
    took = time.monotonic() - start
    summary = f"{launched}, " if launched else ""
    variant = ", sbi's early-stopping classifier" if args.early_stopping else ""
    print(
        f"{args.task} seed {args.seed}: {summary}C2ST {value:.3f} ({took:.0f} s to score{variant})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
