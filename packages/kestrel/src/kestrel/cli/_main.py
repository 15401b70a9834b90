"""The ``kestrel`` command.

Sub-commands that need neither Ray nor PyTorch::

    kestrel graph    -c CONFIG [--trust] [key=value ...]             # print the graph
    kestrel simulate -c CONFIG -n N -o OUT.npz [--seed S] [--force] [--trust] [key=value ...]
    kestrel plot     -o RUN [--mode MODE] [--file SAMPLES.npz] [--image IMAGE] [--force]
    kestrel export   -o RUN [--format arviz] [--file SAMPLES.npz] [--to OUT.nc] [--force]
    kestrel cluster slurm-script -c CONFIG -o RUN [--nodes N] … [--to FILE [--force]]  # sbatch script
    kestrel import   [-c CONFIG] -o RUN [--trust] NODE=FILE ... [key=value ...]  # kestrel.cli._import

A ``-c`` that names a run folder's ``config.yml`` is that run's config: without ``--trust`` it
may use only Kestrel's config classes and the run's code folders (:mod:`kestrel.rundir._trust`).
``plot`` and ``export`` read a run's config as data and import nothing from it. Every path
argument expands a leading ``~`` as a shell does (:func:`~kestrel.cli._arguments.user_path`).

An output file the user names (``simulate -o``, ``--image``, ``--to``) that exists is refused
unless it lies inside the run or ``--force`` is given (:mod:`kestrel.rundir._outputs`).

``key=value`` arguments are OmegaConf dotlist overrides (``graph.x.simulator.sigma=0.2``).
Errors of the user's making (:class:`~kestrel_core.KestrelError`) and a full disk (a
``DiskFullError``, or any ``OSError`` ``ENOSPC``/``EDQUOT``/``EROFS``: the file and the space
left) print one message to stderr and exit with status 1; any other exception (raised in a simulator) prints the frames of
the user's code only, status 1. ``--debug`` or ``KESTREL_DEBUG=1`` shows the full traceback.

Sub-commands of the other layers
--------------------------------
``launch``, ``sample`` (:mod:`kestrel.cli._commands`) and ``check`` (:mod:`kestrel.cli._check`)
run on Ray and PyTorch. Their modules import neither at module level, so ``kestrel --help``
stays fast; the command itself imports them. Without the layer a command needs installed, the
command prints which package to install and exits with status 2; a command whose module fails
to load breaks only itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib import import_module

from kestrel.__about__ import __version__
from kestrel.cli._arguments import (
    add_config_arguments,
    config_from_args,
    force_argument,
    non_negative_int,
    positive_int,
    trust_argument,
    user_path,
)
from kestrel.cli._cluster import cluster_command
from kestrel.cli._import import import_command
from kestrel.cli._warnings import clean_warnings
from kestrel_core import ConfigError, KestrelError
from kestrel_core.internal import as_disk_full, attached_traceback, user_traceback

__all__ = ["main", "build_parser", "layer_installed", "LAYER_COMMANDS"]

#: sub-commands that run on the other layers: name → (module, registering function, the
#: library modules it needs)
LAYER_COMMANDS = {
    "launch": ("kestrel.cli._commands", "launch_command", ("kestrel_ray", "kestrel_torch")),
    "sample": ("kestrel.cli._commands", "sample_command", ("kestrel_ray", "kestrel_torch")),
    "check": ("kestrel.cli._check", "check_command", ("kestrel_ray", "kestrel_torch")),
}
_IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def _cmd_graph(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    print(cfg.graph.describe())
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from kestrel.preflight._reproducible import warn_unreproducible
    from kestrel.rundir._outputs import check_output_file
    from kestrel_core import flat_key, sample_forward, seed_sequence
    from kestrel_core.internal import SkipLog, print_report, save_npz

    output = check_output_file(_npz_name(args.output), "-o", force=args.force)
    cfg = config_from_args(args)
    seq = seed_sequence(args.seed)
    trace = sample_forward(cfg.graph, args.n, seed=seq, skipped=(skipped := SkipLog()))
    arrays = {name: trace[flat_key(name)] for name in cfg.graph.nodes}
    warn_unreproducible(cfg.graph, arrays)  # --seed must reproduce the file
    path = save_npz(output, arrays)
    shapes = ", ".join(f"{name} {tuple(a.shape[1:])}" for name, a in arrays.items())
    n = len(trace[flat_key(next(iter(cfg.graph.nodes)))])  # without the skipped samples
    print(f"kestrel simulate: {n} samples (seed {seq.entropy}) → {path}: {shapes}")
    print_report("kestrel simulate", skipped, args.n, arrays)
    return 0


def _npz_name(name: str) -> str:
    """``-o`` of ``kestrel simulate``: ``OUT.npz`` as given, ``OUT`` → ``OUT.npz``; a folder is
    returned as is (refused as a folder by the output check).

    Raises:
        ConfigError: another suffix (``x.npy``, ``model.py``): the file would be an .npz archive
            under a name that says otherwise, or ``<name>.npz`` beside it.
    """
    if os.path.isdir(name) or name.endswith(".npz"):
        return name
    suffix = os.path.splitext(name)[1]
    if suffix:
        stem = name[: -len(suffix)]
        raise ConfigError(
            f"-o {name}: kestrel simulate writes an .npz archive (one array per node), not a "
            f"{suffix} file; name it {stem}.npz"
        )
    return name + ".npz"


def _cmd_plot(args: argparse.Namespace) -> int:
    from kestrel.plot._plot import MissingExtra, plot_run

    sample_file, image = args.file, args.image
    if sample_file and os.path.splitext(sample_file)[1].lower() in _IMAGE_SUFFIXES:
        # before 0.2, --file named the image: keep that working, say what is meant now
        print(
            f"kestrel plot: --file {sample_file} is an image name; use --image for it "
            "(--file now names the sample file to draw)",
            file=sys.stderr,
        )
        sample_file, image = None, image or sample_file
    try:
        paths = plot_run(args.output, args.mode, image, sample_file=sample_file, force=args.force)
    except MissingExtra as err:
        print(err, file=sys.stderr)
        return 2
    for path in paths:
        print(f"kestrel plot: {args.mode} → {path}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from kestrel.export._export import export_run
    from kestrel.plot._plot import MissingExtra

    try:
        path = export_run(
            args.output, args.format, args.to, sample_file=args.file, force=args.force
        )
    except MissingExtra as err:
        print(err, file=sys.stderr)
        return 2
    print(f"kestrel export: {args.format} → {path}")
    return 0


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The parser with every sub-command.

    Returns:
        ``(parser, unavailable)``: ``unavailable`` maps each command that cannot run — a
        command that failed to load, a command whose layer is not installed — to the
        one-line message to print.
    """
    parser = argparse.ArgumentParser(
        prog="kestrel", description="Kestrel: simulation-based inference on a graph of simulators."
    )
    parser.add_argument("--version", action="version", version=f"kestrel {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of errors (also KESTREL_DEBUG=1)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "graph",
        help="print the graph of a config",
        description="Print the graph: "
        "nodes in forward order with edges, observed nodes, evidence and estimators.",
    )
    add_config_arguments(p)
    trust_argument(p)
    p.set_defaults(func=_cmd_graph)

    p = sub.add_parser(
        "simulate",
        help="forward-simulate the graph in this process",
        description="Draw N joint samples in this process and write one array per "
        "node, shape (N, ...), to an .npz file. Samples whose simulation raised in a node with "
        "on_error: skip are dropped (counted per node); samples holding NaN or inf are kept "
        "(a note counts them per node).",
    )
    add_config_arguments(p)
    p.add_argument("-n", type=positive_int, required=True, metavar="N", help="number of samples")
    p.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="OUT.npz", help="output file"
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=None, help="seed (default: fresh entropy, printed)"
    )
    force_argument(p, "-o")
    trust_argument(p)
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser(
        "plot",
        help="corner plot of one sample file of a run (needs kestrel[plot])",
        description="Draw one sample file of a run (the newest of MODE unless --file names "
        "one): 1-D histograms and 2-D contours at 68/95 % on axes spanning the central "
        "99 %, axes named by the nodes' `names`, true values marked when the observation "
        "file holds <node>_true; for ppd and prior samples also the predictive bands of each "
        "observed node with the observed data. Writes RUN/plots/<mode>.png. "
        "Needs matplotlib and corner: pip install 'kestrel[plot]'.",
    )
    p.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="RUN", help="run directory"
    )
    p.add_argument(
        "--mode",
        default="posterior",
        choices=("prior", "posterior", "proposal", "ppd"),
        help="which samples (default: %(default)s)",
    )
    p.add_argument(
        "--file",
        default=None,
        type=user_path,
        metavar="PATH",
        help="one of the run's sample files of MODE (RUN/samples/MODE/…/NNNNNN.npz) to draw "
        "(default: the newest)",
    )
    p.add_argument(
        "--image",
        default=None,
        type=user_path,
        metavar="IMAGE",
        help="image file (default: RUN/plots/<mode>.png)",
    )
    force_argument(p, "--image")
    p.set_defaults(func=_cmd_plot)

    p = sub.add_parser(
        "export",
        help="write a run's posterior samples for other tools (arviz netCDF)",
        description="Write one posterior sample file of a run (the newest unless --file names "
        "one) as an ArviZ InferenceData in netCDF (groups posterior and observed_data; the "
        "nodes' `names` become coordinates). Needs arviz: pip install 'kestrel[export]'.",
    )
    p.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="RUN", help="run directory"
    )
    p.add_argument("--format", default="arviz", choices=("arviz",), help="(default: %(default)s)")
    p.add_argument(
        "--file",
        default=None,
        type=user_path,
        metavar="PATH",
        help="one of the run's posterior sample files (RUN/samples/posterior/…/NNNNNN.npz)",
    )
    p.add_argument(
        "--to",
        default=None,
        type=user_path,
        metavar="OUT",
        help="output file (default: RUN/export/posterior.nc)",
    )
    force_argument(p, "--to")
    p.set_defaults(func=_cmd_export)

    cluster_command(sub)  # kestrel cluster slurm-script (kestrel.cli._cluster)

    import_command(sub)

    unavailable: dict[str, str] = {}
    for name, (module, register, layers) in LAYER_COMMANDS.items():
        missing = [m for m in layers if not layer_installed(m)]
        if missing:
            package = missing[0].replace("_", "-")
            sub.add_parser(name, help=f"(needs {package}: pip install {package})", add_help=False)
            unavailable[name] = f"kestrel {name} needs the {package} package: pip install {package}"
            continue
        try:
            getattr(import_module(module), register)(sub)
        except Exception as err:  # a broken command must not break the other commands
            if name not in sub.choices:
                sub.add_parser(name, help="(failed to load)", add_help=False)
            unavailable[name] = (
                f"kestrel {name}: the command failed to load ({module}:{register}): "
                f"{type(err).__name__}: {err}"
            )
    return parser, unavailable


def layer_installed(module: str) -> bool:
    """Whether the library ``module`` (``kestrel_ray``, ``kestrel_torch``) can be imported."""
    return importlib.util.find_spec(module) is not None


def _command(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


@clean_warnings
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kestrel`` command; returns the exit status.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        0 on success, 1 for a user error (message on stderr), 2 for a usage error or a
        missing / broken layer package, 130 on Ctrl-C (SIGINT) and 143 on SIGTERM (a launch's
        graceful stop, or a command ended by the signal).
    """
    from kestrel.controller._stop import interrupt_exit_status, signals_interrupt

    argv = list(sys.argv[1:] if argv is None else argv)
    parser, unavailable = build_parser()
    debug = "--debug" in argv or os.environ.get("KESTREL_DEBUG", "") not in ("", "0")
    command = _command(argv)
    if command in unavailable:
        print(unavailable[command], file=sys.stderr)
        return 2
    try:
        args, extra = parser.parse_known_args(argv)
        overrides = [a for a in extra if "=" in a and not a.startswith("-")]
        rest = [a for a in extra if a not in overrides]
        if rest or (overrides and not hasattr(args, "overrides")):
            parser.error(f"unrecognized arguments: {' '.join(rest or overrides)}")
        if overrides:
            args.overrides = list(args.overrides) + overrides
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with signals_interrupt():  # SIGTERM ends a command as Ctrl-C does (exit status 143)
            status = args.func(args)
    except KestrelError as err:
        if debug:
            raise
        print(f"kestrel {command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"kestrel {command}: interrupted", file=sys.stderr)
        return interrupt_exit_status()
    except Exception as err:  # raised in user code (a simulator): its frames only
        if debug:
            raise
        full = as_disk_full(err, getattr(err, "filename", None) or "a file")
        if full is not None:  # a full disk met outside Kestrel's writers: one line too
            print(f"kestrel {command}: error: {full}", file=sys.stderr)
            return 1
        print(
            f"kestrel {command}: error: {type(err).__name__}: {err}\n"
            f"{attached_traceback(err) or user_traceback(err)}"
            "(--debug or KESTREL_DEBUG=1 shows the full traceback)",
            file=sys.stderr,
        )
        return 1
    return 0 if status is None else int(status)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
