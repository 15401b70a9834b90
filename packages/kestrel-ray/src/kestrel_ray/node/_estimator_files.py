"""Estimator files, written and read by the driver only.

A node actor never writes into the run directory (on a cluster it has its own disk): the
driver asks each estimator actor for its state as bytes (``NodeWrapper.save_state``: the bytes
and the epoch they reached) and writes
``<folder>/estimator.pt`` itself, atomically (a temporary file renamed over the old one, so an
interrupted save never leaves a half-written file); loading reads the file on the driver and
sends the bytes to the actor (``NodeWrapper.load_bytes``, ``torch.load(weights_only=True)``
inside).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import ray

from kestrel_core import EstimatorError
from kestrel_core.internal import (
    ESTIMATOR_FILE,
    DiskFullError,
    read_estimator_file,
    write_atomic,
)
from kestrel_ray._errors import unwrap_error

__all__ = ["estimator_file", "transfer_estimators"]


def estimator_file(folder: str) -> str:
    """``<folder>/estimator.pt``: where a node's estimator state is kept."""
    return os.path.join(folder, ESTIMATOR_FILE)


def transfer_estimators(
    method: Literal["save", "load"], actors: Mapping[str, Any], folders: Mapping[str, str]
) -> dict[str, int | None]:
    """Save every node's estimator state into its folder, or load it from there.

    Args:
        method: ``"save"`` (actor → bytes → driver's file) or ``"load"`` (file → actor).
        actors: node → its estimator's actor handle (a ``NodeWrapper``).
        folders: node → its folder on the driver (``<graph>/<node>``).

    Returns:
        ``"save"``: node → the epoch count of the weights written (``None``: the estimator
        reports none); ``"load"``: ``{}``.

    Raises:
        EstimatorError: no saved state to load (naming the node and the file), or the file
            cannot be written.
        DiskFullError: the file cannot be written for lack of space (the old one stays).
        KestrelError: the estimator failed (its error, naming the node and the file).
    """
    files = {name: estimator_file(folder) for name, folder in folders.items()}
    if method == "save":
        refs = {name: actors[name].save_state.remote() for name in files}
    else:
        refs = {}
        for name, path in files.items():
            data = read_estimator_file(name, path)
            refs[name] = actors[name].load_bytes.remote(data, f"checkpoint {path!r}")
    epochs: dict[str, int | None] = {}
    for name, ref in refs.items():
        try:
            data = ray.get(ref)
        except ray.exceptions.RayError as err:
            raise unwrap_error(err, name, f"{method} {files[name]!r}") from err
        if method == "save":
            data, epochs[name] = data
        if method == "save" and data is not None:
            try:
                write_atomic(files[name], data)
            except DiskFullError:  # the old file stays; the launch stops on this one type
                raise
            except OSError as err:
                raise EstimatorError(
                    f"node {name!r}: cannot write {files[name]}: {err.strerror or err}"
                ) from err
    return epochs
