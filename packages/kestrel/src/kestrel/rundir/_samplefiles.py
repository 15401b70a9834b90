"""Where a run's sample files live: one folder per mode, and per observation for the modes that
depend on one.

Layout under the run's samples folder (``RUN/samples`` unless ``paths.samples`` moves it)::

    prior/NNNNNN.npz                       forward draws: no observation involved
    <mode>/<digest>/NNNNNN.npz             posterior, proposal, ppd: one folder per observation
    <mode>/<digest>/observation.npz        the observation those samples are conditioned on
    <mode>/LATEST                          the newest file of the mode (survives ``cp -r``)

``<digest>`` is :func:`observation_digest` of the observed nodes' arrays (every observed node,
the graph's own observations with any given ones substituted), so samples drawn for different
observations never share a folder, and the same observation always finds its folder again.
Each ``NNNNNN.npz`` holds one array per node, ``(n, *D)``; files are numbered per folder.

Files written before the per-observation folders (``<mode>/NNNNNN.npz`` directly) are still
listed, as samples of an unknown observation (:func:`sample_observation` returns ``None``).
Pure numpy and ``os``: used by ``kestrel sample`` (kestrel-ray) and ``kestrel plot`` (here).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from kestrel.rundir._runfiles import read_npz
from kestrel_core import ConfigError
from kestrel_core.internal import save_npz, write_atomic

__all__ = [
    "OBSERVED_MODES",
    "OBSERVATION_FILE",
    "observation_digest",
    "digest_form",
    "sample_folder",
    "sample_files",
    "latest_sample_file",
    "write_sample_file",
    "sample_observation",
]

#: the sample modes whose draws depend on the observation (one folder per observation)
OBSERVED_MODES = ("posterior", "proposal", "ppd")
#: written beside the sample files of one observation: node → ``x_o`` (shape ``D``)
OBSERVATION_FILE = "observation.npz"
#: ``<mode>/LATEST``: the newest sample file of the mode, relative to ``<mode>/``
LATEST_FILE = "LATEST"
#: hex characters of the digest (48 bits)
DIGEST_CHARS = 12
_SAMPLE_FILE = re.compile(r"^(\d{6,})\.npz$")
_DIGEST = re.compile(rf"^[0-9a-f]{{{DIGEST_CHARS}}}$")


def digest_form(array: npt.ArrayLike) -> np.ndarray:
    """An observation as it is digested: real values as float64, C-contiguous.

    Observations enter with the dtype they were given in (an estimator casts its conditions to
    the dtype it was trained on), so ``[1, -2, 3]`` as int, float16, float32 or float64 is one
    observation: bool, int and float arrays are compared as float64 (where that keeps every
    value exactly; an int too large for float64 keeps its dtype). A float64 array is digested
    as it is, so the digests of float64 observations do not depend on this step.

    Example:
        >>> digest_form(np.array([1, -2, 3], np.int32)).dtype
        dtype('float64')
    """
    arr = np.ascontiguousarray(array)
    if arr.dtype.kind in "biuf" and arr.dtype != np.float64:
        wide = np.ascontiguousarray(arr, dtype=np.float64)
        if np.array_equal(wide, arr) and np.array_equal(wide.astype(arr.dtype), arr):
            return wide
    if not arr.dtype.isnative:
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    return arr


def observation_digest(observations: Mapping[str, Any]) -> str:
    """A short, stable name for a set of observations.

    The SHA-256 of each node's name, dtype, shape and C-order bytes (of :func:`digest_form`:
    real values as float64), nodes in sorted order; the first 12 hex characters. Equal arrays
    give equal digests in every process, whatever dtype and byte order they were given in (int
    and float32 ``[1, -2, 3]`` are the float64 one); a change of one value or the shape gives
    another.

    Args:
        observations: node → ``x_o``, array-like of shape ``D`` (no batch axis).

    Returns:
        12 lowercase hex characters.

    Raises:
        ConfigError: no observation given.

    Example:
        >>> observation_digest({"x": np.zeros(3)}) == observation_digest({"x": np.zeros(3)})
        True
        >>> observation_digest({"x": np.zeros(3)}) == observation_digest({"x": np.zeros(4)})
        False
        >>> observation_digest({"x": np.zeros(3, int)}) == observation_digest({"x": np.zeros(3)})
        True
    """
    if not observations:
        raise ConfigError("observation digest: no observed node")
    sha = hashlib.sha256()
    for name in sorted(observations):
        arr = digest_form(observations[name])
        header = f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode()
        sha.update(len(header).to_bytes(8, "little") + header)
        sha.update(arr.tobytes())
    return sha.hexdigest()[:DIGEST_CHARS]


def _digest_of(observation: str | Mapping[str, Any] | None) -> str | None:
    if observation is None or isinstance(observation, str):
        return observation
    return observation_digest(observation)


def sample_folder(
    samples: str, mode: str, observation: str | Mapping[str, Any] | None = None
) -> str:
    """``<samples>/<mode>`` or, with an observation, ``<samples>/<mode>/<digest>``.

    Args:
        samples: the run's samples folder. mode: the sample mode.
        observation: a digest, or node → ``x_o`` (digested here), or ``None``.
    """
    digest = _digest_of(observation)
    folder = os.path.join(samples, mode)
    return folder if digest is None else os.path.join(folder, digest)


def _numbered(folder: str) -> list[str]:
    if not os.path.isdir(folder):
        return []
    names = sorted(n for n in os.listdir(folder) if _SAMPLE_FILE.match(n))
    return [os.path.join(folder, n) for n in names]


def sample_files(
    samples: str, mode: str, observation: str | Mapping[str, Any] | None = None
) -> list[str]:
    """The sample files of ``mode``, oldest first.

    Args:
        samples: the run's samples folder. mode: the sample mode.
        observation: a digest or node → ``x_o``: only that observation's files, in number
            order. ``None``: every file of the mode — files of the old flat layout and of every
            observation folder — ordered by modification time (then path).

    Returns:
        Paths (possibly empty).
    """
    digest = _digest_of(observation)
    folder = os.path.join(samples, mode)
    if digest is not None:
        return _numbered(os.path.join(folder, digest))
    files = _numbered(folder)
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if _DIGEST.match(name):
                files += _numbered(os.path.join(folder, name))
    return sorted(files, key=lambda p: (_mtime(p), p))


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def latest_sample_file(
    samples: str, mode: str, observation: str | Mapping[str, Any] | None = None
) -> str:
    """The newest sample file of ``mode`` (of one observation, when given).

    Without an observation, the file recorded in ``<mode>/LATEST`` by the last write (when it
    still exists), else the newest by modification time.

    Args: as :func:`sample_files`.

    Returns:
        Its path.

    Raises:
        ConfigError: there is none (the message names the folder and the command that makes
            one).
    """
    if observation is None:
        noted = _noted_latest(samples, mode)
        if noted is not None:
            return noted
    files = sample_files(samples, mode, observation)
    if not files:
        folder = sample_folder(samples, mode, observation)
        which = "" if observation is None else " for this observation"
        raise ConfigError(
            f"{folder}: no {mode} samples{which}; run `kestrel sample {mode} -o RUN` first"
        )
    return files[-1]


def write_sample_file(
    samples: str,
    mode: str,
    arrays: Mapping[str, np.ndarray],
    observations: Mapping[str, Any] | None = None,
    *,
    latest: bool = True,
) -> str:
    """Write the next ``NNNNNN.npz`` of a mode (and observation).

    For the modes of :data:`OBSERVED_MODES` the file goes to ``<mode>/<digest>/`` and the
    observation is saved beside it as ``observation.npz`` (once per folder); other modes write
    ``<mode>/NNNNNN.npz``.

    Args:
        samples: the run's samples folder. mode: the sample mode.
        arrays: node → array ``(n, *D)``.
        observations: node → ``x_o`` (shape ``D``) the samples are conditioned on; required
            for the modes of :data:`OBSERVED_MODES`, ignored for the others.
        latest: record the file in ``<mode>/LATEST`` (``False`` for the ``(m, n, *D)`` files
            of a batch of observations, which ``kestrel plot`` does not draw).

    Returns:
        The path written.

    Raises:
        ConfigError: an observed mode without observations.
    """
    if mode in OBSERVED_MODES:
        if not observations:
            raise ConfigError(f"{mode} samples: no observation to file them under")
        folder = sample_folder(samples, mode, observations)
        obs_file = os.path.join(folder, OBSERVATION_FILE)
        if not os.path.isfile(obs_file):
            save_npz(obs_file, {k: digest_form(observations[k]) for k in sorted(observations)})
    else:
        folder = sample_folder(samples, mode)
    existing = [
        int(m.group(1)) for p in _numbered(folder) if (m := _SAMPLE_FILE.match(os.path.basename(p)))
    ]
    index = max(existing) + 1 if existing else 0
    path = save_npz(os.path.join(folder, f"{index:06d}.npz"), arrays)
    if latest:
        _note_latest(samples, mode, path)
    return path


def _note_latest(samples: str, mode: str, path: str) -> None:
    """Record the newest file of a mode (relative), so that "latest" survives a copy of the run
    (``cp -r`` gives every file the time of the copy)."""
    folder = os.path.join(samples, mode)
    write_atomic(os.path.join(folder, LATEST_FILE), os.path.relpath(path, folder).encode())


def _noted_latest(samples: str, mode: str) -> str | None:
    folder = os.path.normpath(os.path.join(samples, mode))
    try:
        with open(os.path.join(folder, LATEST_FILE), encoding="utf-8") as fh:
            rel = fh.read().strip()
    except (OSError, ValueError):  # missing or damaged: the newest file is found without it
        return None
    path = os.path.normpath(os.path.join(folder, rel))
    inside = os.path.dirname(path) == folder or os.path.dirname(os.path.dirname(path)) == folder
    if rel and inside and _SAMPLE_FILE.match(os.path.basename(path)) and os.path.isfile(path):
        return path
    return None


def sample_observation(path: str) -> dict[str, np.ndarray] | None:
    """The observation a sample file was drawn for: node → ``x_o`` (shape ``D``).

    Args:
        path: a sample file.

    Returns:
        The contents of ``observation.npz`` beside it; ``None`` where there is none (prior
        samples, files of the old flat layout).

    Raises:
        RunFileError: (a ConfigError) ``observation.npz`` is empty, cut short or damaged
            (names it; the remedy: delete it, the next sampling call for that observation
            writes it again).
    """
    obs_file = os.path.join(os.path.dirname(os.path.abspath(path)), OBSERVATION_FILE)
    if not os.path.isfile(obs_file):
        return None
    return read_npz(
        obs_file,
        "it records the observation the sample files beside it were drawn for; delete it and "
        "the next sampling call for that observation writes it again",
    )
