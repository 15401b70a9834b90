"""The ``kestrel import`` sub-command: simulations made elsewhere as a run's initial rows.

::

    kestrel import [-c CONFIG] -o RUN [--trust] NODE=FILE ... [key=value ...]

``NODE=FILE``: ``FILE.npy``, ``FILE.npz:key`` or a folder of shards, for every node of the
graph (:mod:`kestrel.importing`). An argument whose left side holds a dot (``buffer.min_samples
=512``) is a config override. Needs neither Ray nor PyTorch: the rows are checked in this
process.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from kestrel.cli._arguments import trust_argument, user_path

if TYPE_CHECKING:
    from kestrel.cli._arguments import Subcommands

__all__ = ["import_command"]


def import_command(subparsers: Subcommands) -> None:
    """Register ``kestrel import``."""
    p = subparsers.add_parser(
        "import",
        help="bring simulations made elsewhere into a new run, as its initial rows",
        description="Check simulations made elsewhere (a campaign on a cluster, sbi's theta / x "
        "saved with numpy) against the config — every node of the graph given, each node's "
        "per-row shape as the dry run or its observation fixes it, one row count, no NaN or "
        "inf, latent root nodes inside their prior's support — and write them into RUN as its "
        "initial rows: RUN/import/NNNNNN.npz, and RUN/config.yml with "
        "buffer.initial_samples_path: import. RUN is a new folder, or one an earlier import "
        "wrote and no launch has run in (the rows are added); a launched run is refused. Then "
        "`kestrel launch -o RUN` trains on them, simulates only what min_samples + "
        "validation_samples still needs, and counts them as simulations of "
        "budget.simulations. Neither Ray nor PyTorch is needed.",
    )
    p.add_argument(
        "-c",
        "--config",
        default=None,
        type=user_path,
        metavar="CONFIG",
        help="config YAML file (default: RUN's own config.yml when an earlier import wrote "
        "it, else config.yml)",
    )
    p.add_argument(
        "-o", "--output", required=True, type=user_path, metavar="RUN", help="run directory"
    )
    trust_argument(p)
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="NODE=FILE",
        help="a node's rows: FILE.npy, FILE.npz:key, or a folder of .npy / .npz shards "
        "(concatenated in name order), one row per simulation; every node of the graph. "
        "key=value with a dotted key (graph.x.simulator.sigma=0.2) is a config override",
    )
    p.set_defaults(func=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    from kestrel.importing._import import import_simulations
    from kestrel.importing._sources import split_pair
    from kestrel_core import ConfigError

    files: dict[str, str] = {}
    overrides: list[str] = []
    for text in args.overrides:
        try:
            node, spec = split_pair(text)
        except ValueError as err:
            raise ConfigError(f"{err} (or a key=value override)") from None
        if "." in node:
            overrides.append(text)
        elif node in files:
            raise ConfigError(f"{node}=…: node {node!r} given twice ({files[node]}, {spec})")
        else:
            files[node] = spec
    if not files:
        raise ConfigError("give each node's rows: kestrel import -o RUN NODE=FILE ...")
    config = args.config
    if config is None and not os.path.isfile(os.path.join(args.output, "config.yml")):
        config = "config.yml"  # a new run: the default config file
    result = import_simulations(config, args.output, files, overrides=overrides, trust=args.trust)
    for note in result.notes:
        print(f"warning: {note}", file=sys.stderr)
    shapes = ", ".join(f"{m} {s}" for m, s in result.shapes.items())
    print(f"kestrel import: {result.rows} rows → {result.path}: {shapes}")
    if result.total != result.rows:
        print(f"  the run holds {result.total} imported rows")
    for line in result.launch_lines():
        print(f"  {line}")
    return 0
