"""Observations: load ``x_o`` from ``.npy`` / ``.npz`` and check it against a node's shape.

Observations are stored **without** a batch axis: a node whose simulator produces values of
per-sample shape ``D`` (batch shape ``(N, *D)``) has an observation of shape ``D``.
"""

from __future__ import annotations

import os
import re
import types
import warnings
from typing import Any

import numpy as np

from ._errors import ConfigError, ShapeError
from ._inputs import as_input

__all__ = [
    "load_observation",
    "check_observation",
    "as_observation",
    "absolute_observation_spec",
    "user_stacklevel",
]

_KEYED = re.compile(r"""^(?P<path>.+?)\[\s*(?P<q>['"])(?P<key>.*)(?P=q)\s*\]\s*$""")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_stacklevel() -> int:
    """``stacklevel`` for :func:`warnings.warn` called from kestrel_core so that the warning
    points at the first frame outside the package (the user's code)."""
    import sys

    level = 1
    frame: types.FrameType | None = sys._getframe(1)
    while (
        frame is not None
        and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR
    ):
        frame = frame.f_back
        level += 1
    return level


def as_observation(array: Any, what: str = "observation") -> np.ndarray:
    """Copy ``array`` to a native-endian, C-contiguous, read-only numeric ndarray.

    The one normalisation of run-time inputs (:func:`~kestrel_core._inputs.as_input`): an
    observation from a file and one passed at run time become the same array.

    Raises:
        ConfigError: the array is not numeric or boolean (e.g. an object array).
    """
    return as_input(array, what)


def load_observation(spec: Any, base_dir: str | os.PathLike[str] = ".") -> np.ndarray:
    """Load an observation.

    Args:
        spec: ``"data/obs.npz['x']"`` (one key of an ``.npz``), ``"obs.npz"`` (an ``.npz``
            holding exactly one array), ``"obs.npy"``, or an array-like (copied).
        base_dir: directory that relative paths are resolved against (the config file's).

    Returns:
        The observation without a batch axis, native-endian, C-contiguous, read-only.

    Raises:
        ConfigError: the file does not exist, is not ``.npy``/``.npz``, the key is missing or
            not given for a multi-key ``.npz`` (the message lists the available keys), or the
            data is not numeric.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); np.savez(os.path.join(d, "obs.npz"), x=np.ones(3))
        >>> load_observation("obs.npz['x']", d).shape
        (3,)
    """
    if not isinstance(spec, (str, os.PathLike)):
        return as_observation(spec)
    text = os.fspath(spec).strip()
    match = _KEYED.match(text)
    path, key = (match["path"].strip(), match["key"]) if match else (text, None)
    full = os.path.normpath(os.path.join(os.fspath(base_dir), os.path.expanduser(path)))
    if not os.path.isfile(full):
        raise ConfigError(f"observation file not found: {full}")
    if full.endswith(".npy"):
        if key is not None:
            raise ConfigError(
                f"observation {text!r}: a .npy file holds one array; remove [{key!r}]"
            )
        return as_observation(np.load(full, allow_pickle=False), f"observation {full}")
    if not full.endswith(".npz"):
        raise ConfigError(f"observation {text!r}: expected a .npy or .npz file")
    with np.load(full, allow_pickle=False) as data:
        keys = list(data.files)
        if key is None:
            if len(keys) != 1:
                raise ConfigError(
                    f"observation {text!r} holds {len(keys)} arrays ({', '.join(keys) or 'none'}); "
                    f"name one: \"{path}['{keys[0] if keys else 'key'}']\""
                )
            key = keys[0]
        if key not in keys:
            raise ConfigError(
                f"observation {text!r}: no key {key!r} in {full} (available: {', '.join(keys) or 'none'})"
            )
        return as_observation(data[key], f"observation {full}['{key}']")


def check_observation(node: Any, obs: Any, sample_shape: tuple[int, ...]) -> np.ndarray:
    """Check an observation against the node's per-sample shape ``D``.

    Args:
        node: node name (or a :class:`~kestrel_core.Node`), for messages.
        obs: the observation, an array.
        sample_shape: ``D``, the per-sample shape the node's simulator produces.

    Returns:
        ``obs`` of shape ``D``. An observation of shape ``(1, *D)`` is squeezed to ``D`` with a
        :class:`UserWarning` naming both shapes.

    Raises:
        ShapeError: several observations are given (``(k, *D)`` with ``k > 1``), or the shape is
            otherwise not ``D``; the message names the node and both shapes.

    Example:
        >>> check_observation("x", np.zeros(3), (3,)).shape
        (3,)
    """
    name = getattr(node, "name", node)
    arr = np.asarray(obs)
    want = tuple(int(s) for s in sample_shape)
    if arr.shape == want:
        return arr
    if arr.ndim == len(want) + 1 and arr.shape[1:] == want:
        if arr.shape[0] == 1:
            warnings.warn(
                f"node {name!r}: observation has shape {arr.shape}, the per-sample shape is {want}; "
                "using it without the leading axis (store observations without a batch axis)",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
            return arr[0]
        raise ShapeError(
            f"node {name!r}: {arr.shape[0]} observations given, one expected (per-sample shape {want})"
        )
    raise ShapeError(
        f"node {name!r}: observation has shape {arr.shape}, but the simulator's per-sample shape is {want}"
    )


def absolute_observation_spec(spec: str, base_dir: str | os.PathLike[str]) -> str:
    """``"data/obs.npz['x']"`` with its path made absolute against ``base_dir``."""
    text = spec.strip()
    match = _KEYED.match(text)
    path, suffix = (
        (match["path"].strip(), text[match.end("path") :].strip()) if match else (text, "")
    )
    full = os.path.normpath(os.path.join(os.fspath(base_dir), os.path.expanduser(path)))
    return full + suffix
