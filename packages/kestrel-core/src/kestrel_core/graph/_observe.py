"""Observations: load ``x_o`` from ``.npy`` / ``.npz`` and check it against a node's shape.

Observations are stored **without** a batch axis: a node whose simulator produces values of
per-sample shape ``D`` (batch shape ``(N, *D)``) has an observation of shape ``D``.

An observation must be finite: a NaN or infinity is refused where the observation enters —
loaded into a graph, given to ``kestrel sample --observation`` or to the Python API — with the
node, the index and the value, never passed on to fail later elsewhere.
Warnings about an observation relative to what an estimator was trained on (a feature constant
in training, an observation far outside the training data, another observation than the one a
run focused on) are :class:`ObservationWarning` instances, which carry their findings as
data.
"""

from __future__ import annotations

import os
import re
import types
import warnings
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError, ShapeError
from kestrel_core.graph._inputs import as_input

__all__ = [
    "load_observation",
    "check_observation",
    "check_finite_observation",
    "first_nonfinite",
    "as_observation",
    "fit_given_observation",
    "absolute_observation_spec",
    "user_stacklevel",
    "ObservationWarning",
]

_KEYED = re.compile(r"""^(?P<path>.+?)\[\s*(?P<q>['"])(?P<key>.*)(?P=q)\s*\]\s*$""")
#: the folder of the kestrel_core package (this module lies in its ``graph/``)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def user_stacklevel() -> int:
    """``stacklevel`` for :func:`warnings.warn` called from kestrel_core so that the warning
    points at the first frame outside the package (the user's code)."""
    import sys

    level = 1
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


class ObservationWarning(UserWarning):
    """A sampling call's observation is unlike what the estimator was trained on.

    Args:
        message: the text shown.
        findings: what was found, one JSON-ready dict each (``node``, ``kind`` — e.g.
            ``"constant"``, ``"far"``, ``"other_observation"`` — and the kind's details), for
            ``status.json`` and the sample files' metadata.
    """

    def __init__(self, message: str, findings: Any = ()) -> None:
        super().__init__(message)
        self.findings: list[dict[str, Any]] = [dict(f) for f in findings]


def first_nonfinite(array: Any) -> tuple[tuple[int, ...], Any, int] | None:
    """Where an array holds NaN or ±inf.

    Args:
        array: a numeric array-like (bool and integer arrays are always finite).

    Returns:
        ``(index, value, count)``: the index (a tuple) and value of the first non-finite
        entry in C order and the number of non-finite entries; ``None`` if all are finite.

    Example:
        >>> first_nonfinite(np.array([0.4, np.nan]))
        ((1,), nan, 1)
    """
    arr = np.asarray(array)
    if arr.dtype.kind not in "fc":
        return None
    bad = ~np.isfinite(arr)
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), arr.shape))
    return index, arr[index].item(), int(bad.sum())


def format_index(index: tuple[int, ...]) -> str:
    """``"1"`` for a 1-D index, ``"(1, 2)"`` otherwise (``"()"`` for a scalar)."""
    return str(index[0]) if len(index) == 1 else str(index)


def check_finite_observation(
    node: Any, obs: Any, what: str = "observation", error: type[Exception] = ConfigError
) -> Any:
    """Refuse an observation that holds NaN or ±inf.

    Args:
        node: node name (or a :class:`~kestrel_core.Node`), for messages; ``None``: unknown.
        obs: the observation, array-like of any shape.
        what: what ``obs`` is, for messages (e.g. ``"observation data/obs.npz['x']"``).
        error: the exception class raised.

    Returns:
        ``obs`` itself.

    Raises:
        ConfigError: (or ``error``) a non-finite value; the message names the node, the index
            and the value of the first one, and how many there are.

    Example:
        >>> check_finite_observation("x", np.array([0.4, np.inf]))
        Traceback (most recent call last):
        ...
        kestrel_core._errors.ConfigError: node 'x': observation holds inf at index 1 (1 non-finite value of 2); an observation must be finite
    """
    found = first_nonfinite(obs)
    if found is not None:
        index, value, count = found
        size = int(np.size(obs))
        plural = "s" if count > 1 else ""
        prefix = "" if node is None else f"node {getattr(node, 'name', node)!r}: "
        raise error(
            f"{prefix}{what} holds {value} at index "
            f"{format_index(index)} ({count} non-finite value{plural} of {size}); "
            "an observation must be finite"
        )
    return obs


def as_observation(array: Any, what: str = "observation", *, node: str | None = None) -> np.ndarray:
    """Copy ``array`` to a native-endian, C-contiguous, read-only real numeric ndarray.

    The one normalisation of run-time inputs (:func:`~kestrel_core.graph._inputs.as_input`): an
    observation from a file and one passed at run time become the same array.

    Raises:
        ConfigError: the array is not real numeric or boolean (an object or complex array), or
            a masked array with masked entries; the message names ``node`` when given.
    """
    return as_input(array, what, node=node)


def load_observation(
    spec: Any, base_dir: str | os.PathLike[str] = ".", *, node: str | None = None
) -> np.ndarray:
    """Load an observation.

    Args:
        spec: ``"data/obs.npz['x']"`` (one key of an ``.npz``), ``"obs.npz"`` (an ``.npz``
            holding exactly one array), ``"obs.npy"``, or an array-like (copied).
        base_dir: directory that relative paths are resolved against (the config file's).
        node: the observed node, named in messages.

    Returns:
        The observation without a batch axis, native-endian, C-contiguous, read-only.

    Raises:
        ConfigError: the file does not exist, is not ``.npy``/``.npz`` or cannot be read as a
            numeric array (an object array saved with pickling, a damaged file: one line
            naming the node, the file and the key), the key is missing or not given for a
            multi-key ``.npz`` (the message lists the available keys), the data is not real
            numeric (complex, object, strings) or a masked array with masked entries, or it
            holds NaN or ±inf (:func:`check_finite_observation`).

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp(); np.savez(os.path.join(d, "obs.npz"), x=np.ones(3))
        >>> load_observation("obs.npz['x']", d).shape
        (3,)
    """
    obs, what = _load(spec, base_dir, node)
    return check_finite_observation(node, obs, what)


_MAGIC = {".npy": b"\x93NUMPY", ".npz": b"PK"}


def _not_numpy(path: str | None) -> str | None:
    """Why ``path`` is no numpy file at all (a text or CSV file renamed ``.npy``), or ``None``."""
    magic = _MAGIC.get(os.path.splitext(path or "")[1])
    if path is None or magic is None:
        return None
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(magic))
    except OSError:
        return None
    if head == magic:
        return None
    return (
        f"it is not a numpy {os.path.splitext(path)[1]} file (no numpy header; a text or CSV "
        "file? read it with numpy.loadtxt and write it with numpy.save)"
    )


def _unreadable(
    node: str | None, what: str, err: BaseException, path: str | None = None
) -> ConfigError:
    """The one-line error of an observation file numpy cannot read as a numeric array."""
    prefix = "" if node is None else f"node {node!r}: "
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    header = _not_numpy(path)
    if header is not None:
        reason = header
    elif "allow_pickle" in reason:
        reason = "it holds Python objects (an object array, e.g. with None), not numbers"
    return ConfigError(
        f"{prefix}{what} cannot be read as a numeric array ({reason}); expected a numeric "
        "array saved with numpy.save / numpy.savez"
    )


def _load(
    spec: Any, base_dir: str | os.PathLike[str], node: str | None = None
) -> tuple[np.ndarray, str]:
    """The observation of :func:`load_observation`, unchecked, and what it is (for messages)."""
    if not isinstance(spec, (str, os.PathLike)):
        return as_observation(spec, node=node), "observation"
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
        what = f"observation {full}"
        try:
            raw = np.load(full, allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise _unreadable(node, what, err, full) from None
        return as_observation(raw, what, node=node), what
    if not full.endswith(".npz"):
        raise ConfigError(f"observation {text!r}: expected a .npy or .npz file")
    try:
        archive = np.load(full, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise _unreadable(node, f"observation {full}", err, full) from None
    with archive as data:
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
        what = f"observation {full}['{key}']"
        try:
            raw = data[key]
        except (ValueError, OSError, EOFError) as err:
            raise _unreadable(node, what, err) from None
        return as_observation(raw, what, node=node), what


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
        ConfigError: the observation holds NaN or ±inf (names the node, index and value).

    Example:
        >>> check_observation("x", np.zeros(3), (3,)).shape
        (3,)
    """
    name = getattr(node, "name", node)
    arr = np.asarray(obs)
    want = tuple(int(s) for s in sample_shape)
    if arr.shape == want:
        return check_finite_observation(name, arr)
    if arr.ndim == len(want) + 1 and arr.shape[1:] == want:
        if arr.shape[0] == 1:
            warnings.warn(
                f"node {name!r}: observation has shape {arr.shape}, the per-sample shape is {want}; "
                "using it without the leading axis (store observations without a batch axis)",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
            return check_finite_observation(name, arr[0])
        if not want:  # a scalar per sample: the simulator or the observation may be the odd one
            raise ShapeError(
                f"node {name!r}: the simulator returns a scalar, shape (), per sample, but the "
                f"observation has shape {arr.shape}: either the simulator should return "
                f"{arr.shape} per sample, or {arr.shape[0]} observations were given where one "
                "is expected"
            )
        raise ShapeError(
            f"node {name!r}: {arr.shape[0]} observations given, one expected (per-sample shape {want})"
        )
    raise ShapeError(
        f"node {name!r}: observation has shape {arr.shape}, but the simulator's per-sample shape is {want}"
    )


def fit_given_observation(graph: Any, name: str, obs: Any) -> np.ndarray:
    """An observation given for node ``name`` at run time, checked like every other one.

    The graph's own observation of the node fixes its shape ``D``: the given one must have it
    (one of shape ``(1, *D)`` is used as ``D`` with a warning, :func:`check_observation`). For a node without an observation of its own only finiteness is checked.

    Raises:
        ShapeError: another shape than ``D``. ConfigError: a NaN or ±inf (node, index, value).
    """
    own = graph.observations.get(name)
    if own is None:
        return check_finite_observation(name, obs)
    return check_observation(name, obs, tuple(own.shape))


def split_observation_spec(spec: str) -> tuple[str, str]:
    """``"data/obs.npz['x']"`` → ``("data/obs.npz", "['x']")``; a spec without a key → ``(spec, "")``."""
    text = spec.strip()
    match = _KEYED.match(text)
    return (match["path"].strip(), text[match.end("path") :].strip()) if match else (text, "")


def absolute_observation_spec(spec: str, base_dir: str | os.PathLike[str]) -> str:
    """``"data/obs.npz['x']"`` with its path made absolute against ``base_dir``."""
    path, suffix = split_observation_spec(spec)
    full = os.path.normpath(os.path.join(os.fspath(base_dir), os.path.expanduser(path)))
    return full + suffix
