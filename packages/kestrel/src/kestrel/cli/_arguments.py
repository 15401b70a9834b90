"""Arguments shared by the ``kestrel`` sub-commands: the config, overrides, numbers, paths,
``--force`` and ``--trust``.

Every path argument (``-c``, ``-o``, ``--observation``, ``--file``, ``--image``, ``--to``) goes
through :func:`user_path`: a leading ``~`` is expanded as a shell expands it, also when the
shell did not (quoted, ``-o='~/runs/a'``, from a script) — never a folder named ``~``
(``./~`` names one).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:  # `kestrel --help` imports no library
    from kestrel_core import RunConfig

    #: the ``kestrel`` parser's sub-commands (``add_subparsers()``): each command registers there
    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = [
    "add_config_arguments",
    "config_from_args",
    "force_argument",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "trust_argument",
    "user_path",
]


def user_path(text: str) -> str:
    """argparse ``type`` of a path: ``~`` and ``~user`` expanded (:func:`os.path.expanduser`)."""
    return os.path.expanduser(text)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``-c/--config`` (default ``config.yml``) and the ``key=value`` overrides."""
    parser.add_argument(
        "-c",
        "--config",
        default="config.yml",
        type=user_path,
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


def config_from_args(args: argparse.Namespace, **kwargs: Any) -> RunConfig:
    """``load_config(args.config, args.overrides, **kwargs)``; a ``-c`` that names a run
    folder's ``config.yml`` is that run's config: not trusted without ``--trust``
    (:mod:`kestrel.rundir._trust`).

    Raises:
        ConfigError, GraphError: as :func:`~kestrel_core.load_config`.
    """
    from kestrel.rundir._trust import config_trust, trusted_run
    from kestrel_core import load_config

    with trusted_run(os.path.dirname(os.path.abspath(args.config)), getattr(args, "trust", False)):
        trust, origin = config_trust(args.config)
    return load_config(args.config, args.overrides, trust=trust, origin=origin, **kwargs)


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


def force_argument(parser: argparse.ArgumentParser, flag: str) -> None:
    """Add ``--force``: replace the ``flag`` file if it exists."""
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace the {flag} file if it exists (without it an existing file outside the "
        "run is refused)",
    )


def trust_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--trust``: the user trusts the run folder (its config may name any target)."""
    parser.add_argument(
        "--trust",
        action="store_true",
        help="trust the run folder: its config.yml may import and run any code it names "
        "(without it, only Kestrel's config classes and the code of the run's code folders, "
        "paths.imports; pass it only for runs you or someone you trust wrote)",
    )
