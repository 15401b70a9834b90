"""Reading the files of a run directory, checked where they are read.

A run folder outlives the process that wrote it: it is copied, moved, synced, edited, cut
short by a full disk. Every file Kestrel reads back from it goes through one of these readers,
which turn whatever a damaged file does to the parser (``UnicodeDecodeError``,
``JSONDecodeError``, a YAML error, ``BadZipFile``, ``zlib.error``, ``EOFError``) into one line:
**the file, what is wrong with it, and the remedy** (:class:`RunFileError`). The caller gives
the remedy, since only it knows what the file is for.

=============================  ==============================================================
file                           when it is damaged, empty or unreadable
=============================  ==============================================================
``run.json``                   a resume is refused (its seed and launch history are never
                               reset or guessed): restore it, or ``--restart``
                               (:class:`~kestrel.rundir._history.RunHistory`)
``config.yml``                 every command refuses: restore it, or ``--restart`` with the
                               model's config
                               (:func:`~kestrel.rundir._config.load_run_config`)
``observations/*``             every command refuses: copy the observation in again
``graph/<node>/saved.json``    a resume is refused: its epoch counts ``--epochs`` (never 0
                               epochs silently): put back ``previous/``, or delete it to train
                               the node afresh (:func:`check_resume_files`)
``buffer.npz``                 a resume is refused: move it away to resume without its rows,
                               or ``--restart`` (:func:`check_resume_files`; read in full
                               when restored)
``budget.json``                a resume is refused: delete it to count the budget from the
                               rows' ids
sample files                   ``plot``/``export`` refuse: sample again, or ``--file`` another
``<mode>/<digest>/``           refused: delete it, the next sampling call for that observation
``observation.npz``            writes it again
``<mode>/LATEST``              ignored: the newest sample file is found without it
``status.json``                an output only: ignored with a warning
                               (:func:`read_output_json`); never stops a command
journal files                  skipped with a warning naming them
                               (:mod:`kestrel.persist._journal`)
=============================  ==============================================================

Pure standard library and numpy: used without Ray (``sample``, ``plot``, ``export``) and
before Ray starts (a resume's checks).
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
import zlib
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from kestrel_core import ConfigError


class _LaunchHistory(Protocol):
    def launches(self) -> object: ...


class ResumeFolder(Protocol):
    """What :func:`check_resume_files` reads of a run directory (a
    :class:`~kestrel.rundir._rundir.RunDir`, which reads its files with this module)."""

    @property
    def root(self) -> str: ...
    @property
    def snapshots(self) -> str: ...
    @property
    def history(self) -> _LaunchHistory: ...
    def node_dir(self, node: str) -> str: ...


#: the file beside an estimator's weights that says they are complete (``graph/<node>/``)
SAVED_MARKER = "saved.json"

__all__ = [
    "RunFileError",
    "RunFileWarning",
    "read_text",
    "read_json",
    "read_yaml",
    "read_npz",
    "read_npy",
    "read_array_file",
    "check_npz",
    "read_output_json",
    "restart_remedy",
    "check_resume_files",
    "buffer_remedy",
    "read_saved",
    "sample_remedy",
    "read_sample_arrays",
    "observation_remedy",
    "config_remedy",
    "npz_problem",
]

#: what a damaged ``.npy`` / ``.npz`` makes numpy raise
_NUMPY_ERRORS = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


class RunFileError(ConfigError):
    """A file of a run directory is empty, damaged or unreadable.

    The message is one line: ``<path>: <what is wrong>; <remedy>``. A :class:`ConfigError`
    (the ``kestrel`` command prints it and exits with status 1).

    Attributes:
        path: the file. problem: what is wrong with it. remedy: what to do.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, remedy: str):
        self.path = os.fspath(path)
        self.problem = problem
        self.remedy = remedy
        super().__init__(f"{self.path}: {problem}; {remedy}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.problem, self.remedy))


class RunFileWarning(UserWarning):
    """An output file of a run (``status.json``) is damaged and was ignored."""


def restart_remedy(root: str | os.PathLike[str], config: bool = False) -> str:
    """``start the run afresh with `kestrel launch -o ROOT --restart` (…)``; ``config``: with
    ``-c CONFIG`` (the run's own config cannot be read)."""
    root = os.path.abspath(os.fspath(root))
    with_config = "-c CONFIG " if config else ""
    return (
        f"or start the run afresh with `kestrel launch {with_config}-o {root} --restart` "
        f"(its contents move to {os.path.join(root, 'previous')}/N/)"
    )


def config_remedy(root: str | os.PathLike[str]) -> str:
    """What to do about a damaged ``RUN/config.yml``."""
    return (
        "it is the run's config, which every command on the run loads; restore it from a "
        f"backup of the config the run was launched with, {restart_remedy(root, config=True)}"
    )


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


def _decode_problem(err: UnicodeDecodeError) -> str:
    byte = err.object[err.start : err.start + 1]
    return f"it is not text (byte 0x{byte.hex()} at offset {err.start}: garbage or binary data)"


def read_text(path: str | os.PathLike[str], remedy: str) -> str | None:
    """The UTF-8 text of a run file; ``None`` when it does not exist.

    Raises:
        RunFileError: it cannot be read, is not UTF-8 text, or is empty (only white space).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RunFileError(path, f"cannot be read ({_one_line(err)})", remedy) from err
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RunFileError(path, _decode_problem(err), remedy) from None
    if not text.strip():
        raise RunFileError(path, f"the file is empty ({len(raw)} bytes)", remedy)
    return text


def read_json(path: str | os.PathLike[str], remedy: str, *, kind: type = dict) -> Any:
    """A JSON file of the run, whose top level must be a ``kind`` (dict); ``None`` when the file
    does not exist.

    Raises:
        RunFileError: empty, not text, not JSON, or another top level than ``kind``.
    """
    path = os.fspath(path)
    text = read_text(path, remedy)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        problem = f"it is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        raise RunFileError(path, problem, remedy) from None
    if not isinstance(data, kind):
        problem = f"expected a JSON {_json_name(kind)} at the top level, found {_json_kind(data)}"
        raise RunFileError(path, problem, remedy)
    return data


def _json_name(kind: type) -> str:
    names: dict[type, str] = {dict: "object", list: "array"}
    return names.get(kind, kind.__name__)


def _json_kind(data: Any) -> str:
    if data is None:
        return "null"
    names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return names.get(type(data), "a boolean" if isinstance(data, bool) else "a number")


def read_yaml(path: str | os.PathLike[str], remedy: str) -> dict[str, Any] | None:
    """A YAML file of the run whose top level is a mapping; ``None`` when it does not exist.

    Raises:
        RunFileError: empty, not text, not YAML, or not a mapping at the top level.
    """
    import yaml

    path = os.fspath(path)
    text = read_text(path, remedy)
    if text is None:
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise RunFileError(path, f"it is not valid YAML ({_yaml_problem(err)})", remedy) from None
    if not isinstance(data, dict):
        found = "nothing but comments" if data is None else f"a {type(data).__name__}"
        problem = f"expected a mapping (key: value) at the top level, found {found}"
        raise RunFileError(path, problem, remedy)
    return data


def _yaml_problem(err: Exception) -> str:
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{' '.join(str(problem).split())} at line {mark.line + 1}, column {mark.column + 1}"
    return _one_line(err)


def npz_problem(err: BaseException) -> str:
    """What numpy's error on reading an ``.npy`` / ``.npz`` says about the file, in words."""
    if isinstance(err, zipfile.BadZipFile) and "CRC" in str(err):
        return f"its data is damaged ({_one_line(err)}: changed after it was written)"
    if isinstance(err, zipfile.BadZipFile):
        return f"it is not a complete .npz archive ({_one_line(err)}: cut short or overwritten)"
    if isinstance(err, zlib.error):
        return f"its compressed data is damaged ({_one_line(err)})"
    if isinstance(err, EOFError) or "cannot reshape array" in str(err):
        return "it ends early (cut short)"
    if "allow_pickle" in str(err):
        return "it holds Python objects (pickles are never loaded), not numeric arrays"
    return f"numpy cannot read it ({_one_line(err)})"


def read_npz(path: str | os.PathLike[str], remedy: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file of the run, read in full (without pickle), so that a
    damaged member is found here and not later.

    Raises:
        RunFileError: the file is missing, empty, cut short, damaged or holds pickles.
    """
    path = os.fspath(path)
    _require(path, remedy, ".npz")
    try:  # numpy leaves a file it opened itself open when the archive is refused
        with open(path, "rb") as fh:
            loaded = np.load(fh, allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                arrays = None
            else:
                with loaded as data:
                    arrays = {key: np.asarray(data[key]) for key in data.files}
    except _NUMPY_ERRORS as err:
        raise RunFileError(path, npz_problem(err), remedy) from None
    if arrays is None:
        raise RunFileError(path, "it is an .npy array, not an .npz archive", remedy)
    return arrays


def read_npy(path: str | os.PathLike[str], remedy: str) -> np.ndarray:
    """The array of an ``.npy`` file of the run (without pickle).

    Raises:
        RunFileError: the file is missing, empty, cut short, damaged or holds pickles.
    """
    path = os.fspath(path)
    _require(path, remedy, ".npy")
    try:
        with open(path, "rb") as fh:
            value = np.load(fh, allow_pickle=False)
            if not isinstance(value, np.ndarray):
                value.close()
                value = None
    except _NUMPY_ERRORS as err:
        raise RunFileError(path, npz_problem(err), remedy) from None
    if value is None:
        raise RunFileError(path, "it is an .npz archive, not an .npy array", remedy)
    return value


def read_array_file(path: str | os.PathLike[str], remedy: str) -> None:
    """Check that ``path`` (``.npy`` or ``.npz``) reads in full; other suffixes are left to
    their reader.

    Raises:
        RunFileError: as :func:`read_npz` / :func:`read_npy`.
    """
    path = os.fspath(path)
    if path.endswith(".npz"):
        read_npz(path, remedy)
    elif path.endswith(".npy"):
        read_npy(path, remedy)


def check_npz(path: str | os.PathLike[str], remedy: str, keys: Iterable[str] = ()) -> None:
    """A cheap check of an ``.npz`` archive: its table of contents reads (a file cut short has
    none) and it holds the arrays ``keys``. The members' data are not read (a large buffer is
    read once, when it is restored).

    Raises:
        RunFileError: empty, cut short, not an archive, or a key missing.
    """
    path = os.fspath(path)
    _require(path, remedy, ".npz")
    try:
        with zipfile.ZipFile(path) as archive:
            names = {n[:-4] if n.endswith(".npy") else n for n in archive.namelist()}
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as err:
        raise RunFileError(path, npz_problem(err), remedy) from None
    missing = [k for k in keys if k not in names]
    if missing:
        raise RunFileError(path, f"it holds no {missing[0]!r} array", remedy)


#: the first bytes of a numpy file of each suffix
_MAGIC = {".npz": b"PK", ".npy": b"\x93NUMPY"}


def _require(path: str, remedy: str, suffix: str | None = None) -> None:
    """``path`` exists, is not empty and (``suffix``) starts as a numpy file of that kind."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as err:
        what = "it does not exist" if isinstance(err, FileNotFoundError) else _one_line(err)
        raise RunFileError(path, what, remedy) from None
    if size == 0:
        raise RunFileError(path, "the file is empty (0 bytes)", remedy)
    magic = _MAGIC.get(suffix or "")
    if magic is not None and not head.startswith(magic) and not _other_magic(head, suffix):
        what = "archive" if suffix == ".npz" else "array"
        problem = f"it is not a numpy {suffix} {what} (no numpy header: garbage or another format)"
        raise RunFileError(path, problem, remedy)


def _other_magic(head: bytes, suffix: str | None) -> bool:
    """Whether ``head`` is the other numpy kind (an .npy named .npz: said by the reader)."""
    return any(head.startswith(m) for s, m in _MAGIC.items() if s != suffix)


def read_output_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object a launch writes for the user (``status.json``), read back to be updated:
    empty when missing; when damaged, a :class:`RunFileWarning` naming it and empty — an
    output never stops a command, and the next write replaces it."""
    try:
        data = read_json(path, "the next launch writes it anew")
    except RunFileError as err:
        warnings.warn(
            RunFileWarning(f"{err.path}: ignored: {err.problem} (an output only; {err.remedy})"),
            stacklevel=3,
        )
        return {}
    return data or {}


def check_resume_files(run: ResumeFolder, latents: Iterable[str]) -> None:
    """Before a resume writes anything or starts Ray: the files it continues from are readable.

    * ``run.json``: the seed and the launch history (:meth:`~kestrel.rundir._history.
      RunHistory.launches`) — never reset to a new seed silently;
    * ``graph/<node>/saved.json`` of each estimator node that has one: a JSON object whose
      ``epoch`` (when present) is a count — ``--epochs N`` adds N to it;
    * ``<snapshots>/buffer.npz``: its table of contents and its id arrays (:func:`check_npz`;
      the rows are read when restored), and ``budget.json`` beside it (the simulations used).

    Args:
        run: the :class:`~kestrel.rundir._rundir.RunDir` (with the config's ``paths``).
        latents: the estimator nodes.

    Raises:
        RunFileError: the first damaged file: its path, what is wrong and the remedy.
    """
    run.history.launches()
    for node in latents:
        read_saved(os.path.join(run.node_dir(node), SAVED_MARKER), run.root, node)
    buffer = os.path.join(run.snapshots, "buffer.npz")
    if os.path.exists(buffer):
        check_npz(buffer, buffer_remedy(run.root, buffer), ("_ids", "_status", "_next_id"))
    budget = os.path.join(run.snapshots, "budget.json")
    remedy = (
        "it records the simulations the run's budget has used; delete it to count them from "
        f"the saved rows' ids instead (every row the run ever stored), {restart_remedy(run.root)}"
    )
    used = (read_json(budget, remedy) or {"used": 0}).get("used")
    if isinstance(used, bool) or not isinstance(used, int):
        raise RunFileError(budget, f"'used' is {used!r}, not a count of simulations", remedy)


def buffer_remedy(root: str, path: str) -> str:
    """What to do about a damaged buffer snapshot."""
    return (
        f"the buffer snapshot cannot be restored; move it away to resume without its rows "
        f"(`mv {path} {path}.damaged`: the journal's rows are still put back, the others are "
        f"simulated again), {restart_remedy(root)}"
    )


def read_saved(path: str, root: str, node: str) -> dict[str, Any] | None:
    """A node's ``saved.json`` (``None``: none, the node has no saved weights).

    Raises:
        RunFileError: it is damaged, or its ``epoch`` is not a count.
    """
    folder = os.path.dirname(path)
    before = os.path.join(folder, "previous", os.path.basename(path))
    back = (
        f"copy the files of {os.path.dirname(before)} back (the weights saved before these), "
        if os.path.isfile(before)
        else ""
    )
    remedy = (
        f"it records the epoch of the weights saved for node {node!r}, which a resume "
        f"continues (--epochs N counts from it); {back}delete it to train node {node!r} "
        f"afresh in this run, {restart_remedy(root)}"
    )
    data = read_json(path, remedy)
    if data is None:
        return None
    epoch = data.get("epoch", 0)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise RunFileError(path, f"'epoch' is {epoch!r}, not a count of epochs", remedy)
    return data


def sample_remedy(root: str | os.PathLike[str] | None, mode: str) -> str:
    """What to do about a damaged sample file of ``mode``."""
    where = f" -o {os.path.abspath(os.fspath(root))}" if root is not None else " -o RUN"
    return (
        f"draw the samples again with `kestrel sample {mode}{where}` (the new file becomes the "
        "newest), or name another sample file with --file"
    )


def read_sample_arrays(
    path: str | os.PathLike[str], root: str | os.PathLike[str] | None, mode: str
) -> dict[str, np.ndarray]:
    """node → array of one sample file of the run, read in full.

    Raises:
        RunFileError: the file is missing, empty, cut short or damaged.
    """
    return read_npz(path, sample_remedy(root, mode))


def observation_remedy(root: str | os.PathLike[str], node: str | None = None) -> str:
    """What to do about a damaged observation file of the run (its copy in ``observations/``)."""
    whose = f"the observation of node {node!r}" if node else "the observation"
    return (
        f"copy {whose} in again from the data file the run was launched with (the run keeps "
        f"this copy of it), {restart_remedy(root, config=True)}"
    )
