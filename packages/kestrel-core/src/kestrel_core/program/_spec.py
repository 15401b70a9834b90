"""What a :class:`~kestrel_core.program.Program` is told in the config: its command and
templates, its input and output streams and formats, and its paths made absolute.

The names here are the config surface of ``Program`` (:mod:`._program` runs it); the trust
check (:mod:`kestrel_core.config._trust`) and the path resolution of configs
(:mod:`kestrel_core.config._io`) read them without building a ``Program``.
"""

from __future__ import annotations

import os
import shlex
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError

#: the ``_target_`` names of :class:`Program` (its paths are resolved against the config's
#: folder, and the trust check looks at its command)
PROGRAM_TARGETS = (
    "kestrel_core.Program",
    "kestrel_core.program.Program",
    "kestrel_core.program._program.Program",
)
#: seeds passed to the command lie in ``[0, SEED_MAX)`` (a C ``int`` holds them)
SEED_MAX = 2**31 - 1
#: formats of the input and of the output
INPUT_FORMATS = ("json", "npy", "npz", "csv", "txt")
OUTPUT_FORMATS = ("json", "npy", "npz", "csv", "txt")
#: template fields every call defines
CALL_FIELDS = ("seed", "n", "input", "output", "scratch")
#: files of the scratch folder the program's streams go to
STDIN, STDOUT, STDERR = ".stdin", ".stdout", ".stderr"

_FORMATTER = string.Formatter()
_SUFFIX = {".json": "json", ".npy": "npy", ".npz": "npz", ".csv": "csv", ".txt": "txt"}


class _Values(list):
    """A parent's per-sample values in a template: ``{theta}`` → ``0.1,0.2``; ``{theta[0]}``."""

    def __format__(self, spec: str) -> str:
        return ",".join(format(v, spec) for v in self)


def _scalars(arr: np.ndarray) -> Any:
    """A per-sample value as Python numbers: a scalar, or a flat :class:`_Values`."""
    flat = np.asarray(arr).reshape(-1).tolist()
    return flat[0] if np.ndim(arr) == 0 else _Values(flat)


def _field_base(name: str) -> str:
    for sep in ("[", "."):
        name = name.split(sep, 1)[0]
    return name


def _template_fields(text: str, where: str) -> list[str]:
    try:
        return [_field_base(f) for _, f, _, _ in _FORMATTER.parse(text) if f is not None]
    except ValueError as err:  # a literal brace is doubled, as in Python's str.format
        raise ConfigError(
            f"{where}: {text!r} is not a valid template ({err}); write {{{{ for {{"
        ) from err


def _file_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or os.path.isabs(value) or ".." in value.split("/"):
        raise ConfigError(
            f"{where}: expected a file name inside the call's scratch folder (e.g. "
            f"'params.json'), got {value!r}"
        )
    return value


def _stream_spec(
    spec: Any, where: str, stream: str, formats: Sequence[str], default: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """``{"file": name | None, "format": fmt, "key": key | None}`` from the config's mapping."""
    if spec is None:
        return None if default is None else dict(default)
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"{where}: expected a mapping {{file: NAME}} or {{{stream}: FORMAT}}, got {spec!r}"
        )
    unknown = sorted(set(map(str, spec)) - {"file", stream, "format", "key"})
    if unknown or ("file" in spec) == (stream in spec):
        raise ConfigError(
            f"{where}: give exactly one of 'file' or '{stream}' (and optionally 'format', "
            f"'key'); got keys {sorted(map(str, spec))}"
        )
    file = _file_name(spec["file"], f"{where}.file") if "file" in spec else None
    fmt = spec.get("format") if file is not None else spec.get(stream) or spec.get("format")
    if fmt is None and file is not None:
        fmt = _SUFFIX.get(os.path.splitext(file)[1].lower())
        if fmt is None:
            raise ConfigError(
                f"{where}: cannot tell the format of {file!r} from its suffix; add "
                f"'format: …' (one of {', '.join(formats)})"
            )
    if fmt not in formats:
        raise ConfigError(f"{where}: format {fmt!r} is not one of {', '.join(formats)}")
    key = spec.get("key")
    if key is not None and fmt not in ("npz", "json"):
        raise ConfigError(f"{where}.key: only an npz or json {stream} has keys")
    return {"file": file, "format": fmt, "key": None if key is None else str(key)}


def _command(command: Any) -> list[str]:
    if isinstance(command, str):
        try:
            command = shlex.split(command)
        except ValueError as err:
            raise ConfigError(f"command: {command!r} cannot be split into words ({err})") from err
    if (
        not isinstance(command, Sequence)
        or not command
        or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in command)
    ):
        raise ConfigError(
            f"command: expected a non-empty list of words, e.g. ['./sim', '--seed', '{{seed}}'], "
            f"got {command!r}"
        )
    words = [str(a) for a in command]
    if _template_fields(words[0], "command[0]"):
        raise ConfigError(f"command[0]: the program {words[0]!r} may not be a template")
    return words


def absolute_program_paths(spec: dict[str, Any], base_dir: str) -> None:
    """Make a Program spec's paths absolute against the config's folder (in place).

    ``command[0]`` when it holds a ``/`` (``./sim``, ``bin/sim``; a bare name is looked up on
    ``PATH`` as a shell does), ``cwd`` and ``scratch``; a leading ``~`` is expanded.
    """

    def absolute(path: str) -> str:
        return os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))

    command = spec.get("command")
    if isinstance(command, str):
        try:
            command = shlex.split(command)
        except ValueError:
            command = None  # the Program's own check names it
    if isinstance(command, list) and command and isinstance(command[0], str):
        first = os.path.expanduser(command[0])
        if "/" in first:
            spec["command"] = [absolute(first), *command[1:]]
    for key in ("cwd", "scratch"):
        if isinstance(spec.get(key), str):
            spec[key] = absolute(spec[key])
