"""Observations given to ``kestrel sample``: ``--observation [NODE=]FILE[:key]``.

A sampling call may condition on other data than the run's own observation; each given array
replaces the observation of one observed node, and must have that node's shape ``D``.
"""

from __future__ import annotations

import os
import re
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from kestrel.rundir._runfiles import RunFileError, npz_problem, read_array_file
from kestrel.rundir._samplefiles import OBSERVED_MODES
from kestrel_core import ConfigError, Graph, check_observation, load_observation
from kestrel_core.internal import split_observation_spec

__all__ = [
    "read_observation",
    "given_observations",
    "parse_observation_args",
    "ObservationSpec",
    "GivenObservations",
]

#: one observation: an array-like, or a file spec (``FILE.npy``, ``FILE.npz:key``)
ObservationSpec: TypeAlias = npt.ArrayLike | str | os.PathLike[str]
#: the observations of a sampling call (``--observation``, ``observation=``, ``x=``): ``None``
#: (the run's own), one spec for the graph's only observed node, or observed node → spec
GivenObservations: TypeAlias = ObservationSpec | Mapping[str, ObservationSpec] | None

_NODE_SPEC = re.compile(r"^(?P<node>[A-Za-z_][A-Za-z0-9_]*)=(?P<spec>.+)$")


def read_observation(spec: ObservationSpec, node: str | None = None) -> np.ndarray:
    """An observation given on the command line or in Python.

    Args:
        spec: ``FILE.npy``, ``FILE.npz`` (one array), ``FILE.npz:key``, ``"FILE.npz['key']"``
            (relative paths against the working directory), or an array-like.
        node: the observed node it is for (named in messages).

    Returns:
        The array, read-only (its shape is checked against the node later).

    Raises:
        ConfigError: no such file or key (the message lists the keys of an ``.npz``), a file
            that is empty, cut short or damaged (one line naming it), or a NaN or ±inf in the
            data (node, index, value).
    """
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        head, sep, key = text.rpartition(":")
        if sep and "[" not in text and head.endswith(".npz") and key:
            text = f"{head}[{key!r}]"
        path, _ = split_observation_spec(text)
        full = os.path.abspath(os.path.expanduser(path))
        remedy = "give an intact file written with numpy.save / numpy.savez"
        try:
            if os.path.isfile(full):  # read in full first: a damaged file in one line
                read_array_file(full, remedy)
            return load_observation(text, os.getcwd(), node=node)
        except RunFileError as err:
            raise ConfigError(f"--observation {err}") from None
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:  # numpy's, on a damaged file
            raise ConfigError(f"--observation {full}: {npz_problem(err)}; {remedy}") from None
    return load_observation(spec, node=node)


def given_observations(graph: Graph, mode: str, given: GivenObservations) -> dict[str, np.ndarray]:
    """node → ``x_o`` given for one sampling call, checked against the run's observations.

    Args:
        graph: the run's graph. mode: the sample mode.
        given: ``None``; an array or spec (:func:`read_observation`) for the graph's only
            observed node; or a mapping observed node → array or spec.

    Returns:
        node → array of the node's observation shape ``D`` (empty for ``None``).

    Raises:
        ConfigError: ``prior`` with an observation; an unnamed observation where the graph
            observes several nodes; a node that is not observed; an unreadable file.
        ShapeError: an observation of another shape than the node's.
    """
    if given is None:
        return {}
    if mode not in OBSERVED_MODES:
        raise ConfigError(
            f"{mode} samples do not depend on an observation; drop --observation "
            "(observation= from Python)"
        )
    own = graph.observations
    if not isinstance(given, Mapping):
        if len(own) != 1:
            raise ConfigError(
                f"--observation: the graph observes {len(own)} nodes ({', '.join(own) or 'none'}); "
                "name the node: --observation NODE=FILE[:key] (from Python: "
                "observation={'NODE': array or file, …})"
            )
        given = {next(iter(own)): given}
    out = {}
    for node, spec in given.items():
        if node not in own:
            raise ConfigError(
                f"--observation {node}=…: {node!r} is not an observed node of the run "
                f"(observed: {', '.join(own) or 'none'})"
            )
        out[node] = check_observation(node, read_observation(spec, node), own[node].shape)
    return out


def parse_observation_args(args: Iterable[str]) -> GivenObservations:
    """``--observation`` values → what :func:`sample_run` takes: ``None``, one spec (the graph's
    only observed node), or node → spec.

    Raises:
        ConfigError: the same node twice, or a spec without node beside others.
    """
    args = list(args)
    if not args:
        return None
    named = [_NODE_SPEC.match(a) for a in args]
    if len(args) == 1 and named[0] is None:
        return args[0]
    out: dict[str, str] = {}
    for arg, match in zip(args, named):
        if match is None:
            raise ConfigError(
                f"--observation {arg}: with several observations, name each node: NODE=FILE[:key]"
            )
        if match["node"] in out:
            raise ConfigError(f"--observation: node {match['node']!r} given twice")
        out[match["node"]] = match["spec"]
    return out
