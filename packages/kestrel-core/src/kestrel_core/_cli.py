"""The ``kestrel`` command.

Built-in sub-commands (kestrel-core, no Ray, no PyTorch)::

    kestrel graph    -c CONFIG [key=value ...]                       # print the graph
    kestrel simulate -c CONFIG -n N -o OUT.npz [--seed S] [--force] [key=value ...]
    kestrel plot     -o RUN [--mode MODE] [--file SAMPLES.npz] [--image IMAGE] [--force]
    kestrel export   -o RUN [--format arviz] [--file SAMPLES.npz] [--to OUT.nc] [--force]

An output file the user names (``simulate -o``, ``--image``, ``--to``) that exists is refused
unless it lies inside the run or ``--force`` is given (K30, :mod:`kestrel_core._outputs`).

``key=value`` arguments are OmegaConf dotlist overrides (``graph.x.simulator.sigma=0.2``).
Errors of the user's making (:class:`~kestrel_core.KestrelError`) print one message to
stderr and exit with status 1; any other exception (raised in a simulator) prints the frames of
the user's code only, status 1. ``--debug`` or ``KESTREL_DEBUG=1`` shows the full traceback.

Plugin protocol — how other packages add sub-commands
-----------------------------------------------------
A package declares entry points in the group ``kestrel.commands``; the entry point's name is
the sub-command's name and its object is a callable ``register(subparsers)`` returning
nothing::

    # pyproject.toml of kestrel-ray
    [project.entry-points."kestrel.commands"]
    launch = "kestrel_ray.run._commands:launch_command"
    sample = "kestrel_ray.run._commands:sample_command"

    # kestrel_ray/run/_commands.py
    from kestrel_core._cli import add_config_arguments, non_negative_int

    def launch_command(subparsers):
        p = subparsers.add_parser("launch", help="train the estimators")
        add_config_arguments(p)             # -c/--config and key=value overrides
        p.add_argument("--seed", type=non_negative_int)  # shared argparse types
        p.set_defaults(func=run_launch)     # func(args) -> int | None (exit status)

``register`` should import heavy dependencies (ray) inside ``func``, not at module level, so
``kestrel --help`` stays fast. A plugin that fails to load only breaks its own command, which
then reports the error. ``launch`` and ``sample`` without kestrel-ray installed print which
package to install and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any

from .__about__ import __version__
from ._blame import attached_traceback, user_traceback
from ._cli_warnings import clean_warnings
from ._errors import ConfigError, KestrelError

__all__ = ["main", "build_parser", "add_config_arguments", "config_from_args", "LAYER_COMMANDS"]

#: sub-commands other packages provide, and the package to install for each
LAYER_COMMANDS = {"launch": "kestrel-ray", "sample": "kestrel-ray", "check": "kestrel-ray"}
ENTRY_POINT_GROUP = "kestrel.commands"
_IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``-c/--config`` (default ``config.yml``) and the ``key=value`` overrides."""
    parser.add_argument(
        "-c",
        "--config",
        default="config.yml",
        metavar="CONFIG",
        help="config YAML file (default: %(default)s)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        type=_override,
        help="config overrides, e.g. graph.x.simulator.sigma=0.2",
    )


def config_from_args(args: argparse.Namespace, **kwargs: Any) -> Any:
    """``load_config(args.config, args.overrides, **kwargs)``.

    Raises:
        ConfigError, GraphError: as :func:`~kestrel_core.load_config`.
    """
    from ._config import load_config

    return load_config(args.config, args.overrides, **kwargs)


def _override(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return text


def _integer(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type``: an integer ≥ 1 (sample counts)."""
    return _integer(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """argparse ``type``: an integer ≥ 0 (seeds)."""
    return _integer(text, 0, "a non-negative integer")


def positive_float(text: str) -> float:
    """argparse ``type``: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _force_argument(parser: argparse.ArgumentParser, flag: str) -> None:
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace the {flag} file if it exists (without it an existing file outside the "
        "run is refused)",
    )


def _cmd_graph(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    print(cfg.graph.describe())
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from ._forward import sample_forward
    from ._npz import save_npz
    from ._onerror import SkipLog, print_report
    from ._outputs import check_output_file
    from ._random import seed_sequence
    from ._reproducible import warn_unreproducible
    from ._trace import flat_key

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
    from ._plot import MissingExtra, plot_run

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
    from ._export import export_run
    from ._plot import MissingExtra

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
    """The parser with the built-in and the entry-point sub-commands.

    Returns:
        ``(parser, unavailable)``: ``unavailable`` maps each command that cannot run — a
        plugin that failed to load, a layer command whose package is not installed — to the
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
    p.add_argument("-o", "--output", required=True, metavar="OUT.npz", help="output file")
    p.add_argument(
        "--seed", type=non_negative_int, default=None, help="seed (default: fresh entropy, printed)"
    )
    _force_argument(p, "-o")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser(
        "plot",
        help="corner plot of one sample file of a run (needs kestrel-core[plot])",
        description="Draw one sample file of a run (the newest of MODE unless --file names "
        "one): 1-D histograms and 2-D contours at 68/95 % on axes spanning the central "
        "99 %, axes named by the nodes' `names`, true values marked when the observation "
        "file holds <node>_true; for ppd and prior samples also the predictive bands of each "
        "observed node with the observed data. Writes RUN/plots/<mode>.png. "
        "Needs matplotlib and corner: pip install 'kestrel-core[plot]'.",
    )
    p.add_argument("-o", "--output", required=True, metavar="RUN", help="run directory")
    p.add_argument(
        "--mode",
        default="posterior",
        choices=("prior", "posterior", "proposal", "ppd"),
        help="which samples (default: %(default)s)",
    )
    p.add_argument(
        "--file",
        default=None,
        metavar="PATH",
        help="one of the run's sample files of MODE (RUN/samples/MODE/…/NNNNNN.npz) to draw "
        "(default: the newest)",
    )
    p.add_argument(
        "--image", default=None, metavar="IMAGE", help="image file (default: RUN/plots/<mode>.png)"
    )
    _force_argument(p, "--image")
    p.set_defaults(func=_cmd_plot)

    p = sub.add_parser(
        "export",
        help="write a run's posterior samples for other tools (arviz netCDF)",
        description="Write one posterior sample file of a run (the newest unless --file names "
        "one) as an ArviZ InferenceData in netCDF (groups posterior and observed_data; the "
        "nodes' `names` become coordinates). Needs arviz: pip install 'kestrel-core[export]'.",
    )
    p.add_argument("-o", "--output", required=True, metavar="RUN", help="run directory")
    p.add_argument("--format", default="arviz", choices=("arviz",), help="(default: %(default)s)")
    p.add_argument(
        "--file",
        default=None,
        metavar="PATH",
        help="one of the run's posterior sample files (RUN/samples/posterior/…/NNNNNN.npz)",
    )
    p.add_argument(
        "--to", default=None, metavar="OUT", help="output file (default: RUN/export/posterior.nc)"
    )
    _force_argument(p, "--to")
    p.set_defaults(func=_cmd_export)

    unavailable: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()(sub)
        except Exception as err:  # a broken plugin must not break the other commands
            unavailable[ep.name] = (
                f"kestrel {ep.name}: the command failed to load ({ep.value}): {type(err).__name__}: {err}"
            )
    for name, package in LAYER_COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=f"(needs {package}: pip install {package})", add_help=False)
            unavailable.setdefault(
                name, f"kestrel {name} needs the {package} package: pip install {package}"
            )
    return parser, unavailable


def _command(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


@clean_warnings
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kestrel`` command; returns the exit status.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        0 on success, 1 for a user error (message on stderr), 2 for a usage error or a
        missing / broken layer package, 130 on Ctrl-C.
    """
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
        return 130
    except Exception as err:  # raised in user code (a simulator): its frames only
        if debug:
            raise
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
