"""The bytes of a run's ``config.yml`` and ``observations/``, kept while a resume replaces
them and put back when it fails before its buffer was restored (a refused resume leaves the
run as it was)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kestrel.rundir._rundir import RunDir

__all__ = ["config_files", "restore"]


def config_files(run: RunDir) -> dict[str, bytes | None]:
    """path → bytes of ``RUN/config.yml`` and of every file under ``RUN/observations/``
    (``None``: the config file does not exist)."""
    files: dict[str, bytes | None] = {run.config_file: None}
    paths = [run.config_file]
    for folder, _, names in os.walk(run.observations):
        paths += [os.path.join(folder, name) for name in names]
    for path in paths:
        try:
            with open(path, "rb") as fh:
                files[path] = fh.read()
        except FileNotFoundError:
            pass
    return files


def restore(kept: dict[str, bytes | None], now: dict[str, bytes | None]) -> list[str]:
    """Make the files ``now`` (:func:`config_files` of today) what ``kept`` holds: changed
    ones written back (atomically), added ones removed, removed ones written again.

    Returns:
        The paths put back or removed (empty when nothing changed).
    """
    changed = []
    for path, data in now.items():
        old = kept.get(path)
        if data == old:
            continue
        if old is None:
            os.remove(path)
        else:
            tmp = path + ".restore.tmp"
            with open(tmp, "wb") as fh:
                fh.write(old)
            os.replace(tmp, path)
        changed.append(path)
    for path, old in kept.items():  # removed since
        if old is not None and not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(old)
            changed.append(path)
    return changed
