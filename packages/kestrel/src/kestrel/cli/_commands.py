"""The ``kestrel launch`` and ``kestrel sample`` sub-commands.

::

    kestrel launch [-c CONFIG] -o RUN [--resume | --restart] [--epochs N] [--address ADDR]
                   [--reuse OLD ...] [--seed S] [--timeout SEC] [--no-auto-sample]
                   [--progress {auto,live,log,none}] [--check] [--trust] [key=value ...]
    kestrel sample prior|posterior|proposal|ppd -o RUN [-n N] [--seed S] [--address ADDR]
                   [--observation [NODE=]FILE[:key] ...] [--ray] [--trust] [key=value ...]

``--trust``: the user trusts the run folder, whose ``config.yml`` may then name any target
(:mod:`kestrel.rundir._trust`); without it, only Kestrel's config classes and the code of the
run's code folders.

Ray is imported only when a command runs, so ``kestrel --help`` stays fast; ``kestrel sample``
draws in one process without Ray unless it needs Ray (see :mod:`kestrel.sample._sampling`).
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING

from kestrel.cli._arguments import (
    add_config_arguments,
    non_negative_int,
    positive_float,
    positive_int,
    trust_argument,
    user_path,
)
from kestrel.cli._check import add_check_argument

if TYPE_CHECKING:
    from kestrel.cli._arguments import Subcommands

__all__ = ["launch_command", "sample_command"]

_MODES = ("prior", "posterior", "proposal", "ppd")


def launch_command(subparsers: Subcommands) -> None:
    """Register ``kestrel launch``."""
    p = subparsers.add_parser(
        "launch",
        help="train the estimators (adaptive simulation on Ray), save, sample the posterior",
        description="Train every estimator of the graph while simulations from the current proposal keep "
        "arriving; save the weights under RUN/graph/<node>/ and draw sample.posterior.n posterior samples "
        "to RUN/samples/posterior/. On an existing RUN, `-o RUN` alone (or a -c CONFIG equal to "
        "RUN/config.yml) resumes it; a different CONFIG is an error naming the keys that differ, "
        "unless --resume or --restart says what to do. Ctrl-C stops gracefully (exit status 130); "
        "a second Ctrl-C aborts; --timeout stops gracefully with status 'timeout' (exit status 0).",
    )
    add_config_arguments(p)
    # no -c on an existing run: resume it (a new run still defaults to config.yml)
    p.set_defaults(config=None)
    p.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="RUN", help="run directory"
    )
    intent = p.add_mutually_exclusive_group()
    intent.add_argument(
        "--resume",
        dest="mode",
        action="store_const",
        const="resume",
        default="auto",
        help="continue RUN with its own config.yml plus the key=value overrides (a -c CONFIG that "
        "differs is ignored, with a warning naming the keys)",
    )
    intent.add_argument(
        "--restart",
        dest="mode",
        action="store_const",
        const="restart",
        help="move RUN's contents to RUN/previous/N/ and start afresh with CONFIG "
        "(default: RUN's own config.yml) plus the overrides",
    )
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        metavar="N",
        help="train N epochs more than the saved weights have (max_epochs is a total over the "
        "run's launches; not with a max_epochs override)",
    )
    p.add_argument(
        "--simulations",
        type=positive_int,
        default=None,
        metavar="N",
        help="the run's simulation budget: use exactly N simulations over all its launches "
        "(the same as budget.simulations=N)",
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="join this Ray cluster (default: RAY_ADDRESS, else start a local Ray)",
    )
    p.add_argument(
        "--reuse",
        action="append",
        default=[],
        type=user_path,
        metavar="OLD",
        help="start the new run from the simulations kept in the earlier run OLD (its bank), "
        "when OLD's simulators (sections, parents, code) equal CONFIG's: they count in "
        "budget.simulations, so only what the budget adds is simulated; repeat for more runs "
        "(the same as the config's reuse: list)",
    )
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        help="seed (default: fresh entropy, recorded; a resumed run keeps its first seed)",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="the same buffers, weights and samples for a --seed under any machine load: "
        "training waits for each resimulation round (the same as deterministic=true)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=None,
        metavar="SEC",
        help="stop gracefully after SEC seconds, as on Ctrl-C",
    )
    p.add_argument(
        "--no-auto-sample",
        dest="auto_sample",
        action="store_false",
        help="do not sample the posterior after training",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "live", "log", "none"),
        default="auto",
        help="live table (terminal), log lines, or nothing (default: live on a terminal)",
    )
    add_check_argument(p)
    trust_argument(p)
    p.set_defaults(func=_run_launch)


def _run_launch(args: argparse.Namespace) -> int:
    import os

    from kestrel.cli._check import run_calibration, summary_lines
    from kestrel.controller._launch import launch
    from kestrel.controller._states import RunStatus

    progress = {"auto": None, "live": True, "log": 10.0, "none": False}[args.progress]
    config = args.config
    if config is None and not os.path.isfile(os.path.join(args.output, "config.yml")):
        config = "config.yml"  # a new run: the default config file
    overrides = list(args.overrides)
    if args.simulations is not None:
        overrides.append(f"budget.simulations={args.simulations}")
    result = launch(
        config,
        args.output,
        overrides=overrides,
        seed=args.seed,
        timeout=args.timeout,
        address=args.address,
        auto_sample=args.auto_sample,
        progress=progress,
        mode=args.mode,
        epochs=args.epochs,
        deterministic=args.deterministic,
        trust=args.trust,
        reuse=args.reuse,
    )
    print(
        f"kestrel launch: {result.status} in {result.wall_time:.1f} s (seed {result.seed}); "
        f"epochs {result.epochs}; run {result.run_dir}"
    )
    for mode, path in result.samples.items():
        print(f"  {mode} samples: {path}")
    if args.check and result.status in (RunStatus.COMPLETED, RunStatus.TIMEOUT):
        calibration = run_calibration(result.run_dir, address=args.address, trust=args.trust)
        for line in summary_lines(calibration):
            print(line)
    # the shell's convention for a run ended by a signal, 128 + its number (weights saved):
    # 130 for Ctrl-C (SIGINT), 143 for SIGTERM
    if result.status == RunStatus.INTERRUPTED:
        return 128 + int(result.stop_signal or signal.SIGINT)
    return 0


def sample_command(subparsers: Subcommands) -> None:
    """Register ``kestrel sample``."""
    p = subparsers.add_parser(
        "sample",
        help="draw prior / posterior / proposal / ppd samples of a run",
        description="Load a run (RUN/config.yml and the saved weights) and write n samples, one "
        "array per node of shape (n, ...): prior samples to RUN/samples/prior/NNNNNN.npz; "
        "posterior, proposal and ppd samples to RUN/samples/<mode>/<digest>/NNNNNN.npz, one folder "
        "per observation (the run's own unless --observation or a graph.<node>.observed override "
        "gives another; saved beside the samples as observation.npz). n comes from -n or from "
        "sample.<mode>.n in the run's config. Draws are made in this process, without Ray, unless "
        "--address or ray.address names a cluster, --ray is given, or a simulated node has "
        "num_actors > 1. Samples whose simulation raised in a node with on_error: skip are "
        "dropped (counted per node); samples holding NaN or inf are kept (a note counts them "
        "per node).",
    )
    p.add_argument("mode", choices=_MODES, help="what to sample")
    p.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="RUN", help="run directory"
    )
    p.add_argument(
        "-n",
        type=positive_int,
        default=None,
        metavar="N",
        help="number of samples (default: sample.<mode>.n of the run's config)",
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=None, help="seed (default: fresh entropy, printed)"
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="sample on this Ray cluster (default: in this process, without Ray)",
    )
    p.add_argument(
        "--observation",
        action="append",
        default=[],
        metavar="[NODE=]FILE[:key]",
        help="condition on this observation instead of the run's own (.npy, or .npz with :key); "
        "repeat as NODE=FILE[:key] for a graph with several observed nodes; an (m, ...) array "
        "of m >= 2 observations of the node's shape (...) gives n samples for each, written "
        "as (m, n, ...) arrays",
    )
    p.add_argument(
        "--ray",
        action="store_true",
        help="draw on Ray (a local Ray, or RAY_ADDRESS) even where one process can do it",
    )
    trust_argument(p)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (not saved)")
    p.set_defaults(func=_run_sample)


def _run_sample(args: argparse.Namespace) -> int:
    import numpy as np

    from kestrel.sample._observations import parse_observation_args
    from kestrel.sample._sampling import sample_run
    from kestrel_core.internal import print_report

    result = sample_run(
        args.output,
        args.mode,
        n=args.n,
        seed=args.seed,
        overrides=args.overrides,
        address=args.address,
        observation=parse_observation_args(args.observation),
        ray=True if args.ray else None,
        trust=args.trust,
    )
    with np.load(result.path, allow_pickle=False) as npz:  # as written: without skipped rows
        arrays = {m: npz[m] for m in result.shapes}
    rows = len(next(iter(arrays.values()))) if result.batch is None and arrays else result.n
    shapes = ", ".join(f"{m} {s}" for m, s in result.shapes.items())
    where = "on Ray" if result.ray else "in this process"
    each = f" for each of {result.batch} observations" if result.batch else ""
    print(
        f"kestrel sample: {rows} {result.mode} samples{each} (seed {result.seed}, {where}) → "
        f"{result.path}: {shapes}"
    )
    lead = 1 if result.batch is None else 2  # (n, ...), or (m, n, ...) for a batch
    print_report("kestrel sample", result.skipped, result.n, arrays, lead)
    return 0
