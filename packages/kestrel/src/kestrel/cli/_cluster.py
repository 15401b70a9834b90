"""The ``kestrel cluster`` sub-commands: Kestrel on a batch cluster.

::

    kestrel cluster slurm-script -c CONFIG -o RUN [--nodes N] [--cpus-per-node C]
                   [--gpus-per-node G] [--time HH:MM:SS] [--partition P] [--account A]
                   [--port 6379] [--python PATH] [--stop-before SEC] [--job-name NAME]
                   [--to FILE [--force]] [key=value ...]

prints (or writes to ``--to FILE``, an existing file refused without ``--force``) a SLURM batch
script: a Ray cluster on the job's nodes, ``kestrel launch`` on it, a graceful stop before the
time limit, a resume when submitted again (:mod:`kestrel.cluster._slurm`). Imports neither Ray
nor PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kestrel.cli._arguments import force_argument, non_negative_int, positive_int, user_path

if TYPE_CHECKING:
    from kestrel.cli._arguments import Subcommands

__all__ = ["cluster_command"]


def cluster_command(subparsers: Subcommands) -> None:
    """Register ``kestrel cluster`` and its sub-commands."""
    p = subparsers.add_parser(
        "cluster",
        help="run Kestrel on a batch cluster (SLURM): write the batch script",
        description="Kestrel on a batch cluster. `kestrel cluster slurm-script` writes a SLURM "
        "batch script that starts a Ray cluster on the job's nodes and runs `kestrel launch` "
        "on it.",
    )
    sub = p.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: _usage(p))

    s = sub.add_parser(
        "slurm-script",
        help="print a SLURM batch script: a Ray cluster on the job's nodes, kestrel launch on it",
        description="Print a complete, commented sbatch script: `ray start --head` on the job's "
        "first node and `ray start --address HEAD:PORT` on every other node (srun steps), "
        "`kestrel launch -c CONFIG -o RUN --address HEAD:PORT` in the batch shell, the Ray "
        "nodes stopped at the end. SLURM's SIGTERM before the time limit (--stop-before) is "
        "passed on to the launch, which stops gracefully and saves (exit status 143); the same "
        "script submitted again resumes the run. CONFIG and RUN are written as given: relative "
        "paths are relative to the folder the job is submitted from.",
    )
    s.add_argument(
        "-c", "--config", required=True, metavar="CONFIG", help="config file, as the job sees it"
    )
    s.add_argument(
        "-o", "--output", required=True, metavar="RUN", help="run directory, as the job sees it"
    )
    s.add_argument(
        "--nodes",
        type=positive_int,
        default=2,
        metavar="N",
        help="nodes: the Ray head on the first, a Ray worker on each other (default: %(default)s)",
    )
    s.add_argument(
        "--cpus-per-node",
        type=positive_int,
        default=None,
        metavar="C",
        help="CPUs of each node for Ray (default: the whole node, as Ray detects it)",
    )
    s.add_argument(
        "--gpus-per-node",
        type=non_negative_int,
        default=0,
        metavar="G",
        help="GPUs of each node for Ray (default: %(default)s)",
    )
    s.add_argument(
        "--time",
        default="01:00:00",
        metavar="HH:MM:SS",
        help="the job's time limit (default: %(default)s)",
    )
    s.add_argument("--partition", default=None, metavar="P", help="partition (queue)")
    s.add_argument("--account", default=None, metavar="A", help="account charged for the job")
    s.add_argument(
        "--port", type=positive_int, default=6379, help="the Ray head's port (default: %(default)s)"
    )
    s.add_argument(
        "--python",
        default="python3",
        metavar="PATH",
        help="the Python of the environment holding Kestrel and Ray on the nodes "
        "(default: %(default)s, from the PATH of the job)",
    )
    s.add_argument(
        "--stop-before",
        type=positive_int,
        default=120,
        metavar="SEC",
        help="SIGTERM to the launch SEC seconds before the time limit, time to save and "
        "sample (default: %(default)s)",
    )
    s.add_argument(
        "--job-name", default="kestrel", metavar="NAME", help="job name (default: %(default)s)"
    )
    s.add_argument(
        "--to",
        default=None,
        type=user_path,
        metavar="FILE",
        help="write the script to FILE (default: print it)",
    )
    force_argument(s, "--to")
    s.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides of the launch, written into the script",
    )
    s.set_defaults(func=_run_slurm_script)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _run_slurm_script(args: argparse.Namespace) -> int:
    from kestrel.cluster import SlurmOptions, slurm_script
    from kestrel.rundir._outputs import check_output_file

    options = SlurmOptions(
        config=args.config,
        run=args.output,
        nodes=args.nodes,
        cpus_per_node=args.cpus_per_node,
        gpus_per_node=args.gpus_per_node,
        time=args.time,
        partition=args.partition,
        account=args.account,
        port=args.port,
        python=args.python,
        stop_before=args.stop_before,
        job_name=args.job_name,
        launch_args=tuple(args.overrides),
    )
    text = slurm_script(options)  # checked before anything is written
    if args.to is None:
        sys.stdout.write(text)
        return 0
    path = check_output_file(args.to, "--to", force=args.force)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"kestrel cluster: SLURM batch script → {path} (submit it: sbatch {args.to})")
    return 0
