"""Where imported rows live in a run: ``RUN/import/``.

::

    RUN/import/000001.npz     one file per ``kestrel import``: one array per node, ``(n, *D)``
    RUN/import/000002.npz     (the layout ``buffer.initial_samples_path`` reads, in name order)
    RUN/import/imports.json   {"imports": [{"file", "rows", "sources", "time"}, ...]}

The run's ``config.yml`` sets ``buffer.initial_samples_path: import`` (relative to the run,
so a moved run still finds them). A launch that loads its initial rows from this folder counts
them as simulations of the run's budget (:func:`holds_imported_rows`); rows of any other
``initial_samples_path`` are not counted.

Pure standard library.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from kestrel_core import ConfigError
from kestrel_core.internal import write_atomic

__all__ = [
    "IMPORT_DIR",
    "MANIFEST_FILE",
    "import_folder",
    "holds_imported_rows",
    "next_import_file",
    "read_manifest",
    "write_manifest",
]

#: the folder of a run that holds its imported rows
IMPORT_DIR = "import"
#: where each imported file came from, beside the files
MANIFEST_FILE = "imports.json"
_NUMBERED = re.compile(r"^(\d{6})\.npz$")


def import_folder(run_root: str | os.PathLike[str]) -> str:
    """``RUN/import`` (absolute)."""
    return os.path.join(os.path.abspath(os.fspath(run_root)), IMPORT_DIR)


def holds_imported_rows(run_root: str | os.PathLike[str], path: str | None) -> bool:
    """Whether ``path`` (a launch's ``buffer.initial_samples_path``) is the run's own
    ``import/`` folder, whose rows count as simulations of the run's budget."""
    if not path:
        return False
    return os.path.realpath(path) == os.path.realpath(import_folder(run_root))


def next_import_file(folder: str) -> str:
    """The next ``NNNNNN.npz`` in ``folder`` (``000001.npz`` in an empty or new one)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        names = []
    numbers = [int(m[1]) for m in map(_NUMBERED.match, names) if m]
    return os.path.join(folder, f"{max(numbers, default=0) + 1:06d}.npz")


def read_manifest(folder: str) -> list[dict[str, Any]]:
    """The entries of ``<folder>/imports.json`` (empty when there is none).

    Raises:
        ConfigError: the file is damaged (names it).
    """
    path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        entries = data["imports"]
        if not isinstance(entries, list):
            raise TypeError("'imports' is not a list")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"{path}: cannot read the record of earlier imports ({err}); restore it, or remove "
            "it (the .npz files beside it are the imported rows)"
        ) from err
    return [e for e in entries if isinstance(e, dict)]


def write_manifest(folder: str, entries: list[dict[str, Any]]) -> str:
    """Write ``<folder>/imports.json`` atomically; returns its path."""
    path = os.path.join(folder, MANIFEST_FILE)
    text = json.dumps({"imports": entries}, indent=2) + "\n"
    write_atomic(path, text.encode("utf-8"), durable=False)
    return path
