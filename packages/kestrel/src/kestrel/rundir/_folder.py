"""Which folders Kestrel treats as a run: it writes only into a new or empty folder or a run it
wrote, and never over a file it did not write.

A run folder is marked by ``run.json`` (the history of its launches, written beside
``config.yml`` by every launch) or, for runs older than ``run.json``, ``status.json``. A folder
that holds other files but neither marker — a model folder with the user's ``config.yml``,
``model.py`` and ``data/``, say — is not a run: ``kestrel launch -o`` refuses it (resume and
``--restart`` alike, before anything is written or moved), and ``kestrel sample -o`` says what
to do instead of steering the user into launching there.

Every path may start with ``~``: it is expanded as a shell does, never a folder named ``~``.

Pure standard library: used by kestrel-ray's launch and sampling, tested without Ray.
"""

from __future__ import annotations

import os

from kestrel_core import ConfigError

__all__ = [
    "RUN_FILE",
    "RUN_MARKERS",
    "folder_kind",
    "is_run_folder",
    "check_launch_folder",
    "check_run_folder",
    "check_restart_keeps",
]

#: the history of a run's launches; its presence marks a folder as a run
RUN_FILE = "run.json"
#: files only Kestrel writes at the top of a run (``status.json``: runs older than run.json)
RUN_MARKERS = (RUN_FILE, "status.json")
_CONFIG = "config.yml"


def _full(path: str | os.PathLike[str]) -> str:
    """``path`` absolute, a leading ``~`` expanded as a shell does (never a folder named ``~``)."""
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def is_run_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder a launch wrote (it holds one of :data:`RUN_MARKERS`)."""
    root = _full(path)
    return os.path.isdir(root) and any(
        os.path.isfile(os.path.join(root, name)) for name in RUN_MARKERS
    )


def _entries(root: str) -> list[str]:
    """The names in ``root`` that count (hidden ones, e.g. ``.gitkeep``, do not)."""
    return sorted(n for n in os.listdir(root) if not n.startswith("."))


def folder_kind(path: str | os.PathLike[str]) -> str:
    """What ``path`` is to a launch.

    Returns:
        ``"new"`` (it does not exist and can be created), ``"empty"`` (a folder with nothing
        but hidden files), ``"run"`` (:func:`is_run_folder`), ``"other"`` (a folder holding
        files Kestrel did not write), ``"file"`` (it, or a folder above it, is not a folder).
    """
    root = _full(path)
    if os.path.isdir(root):
        if is_run_folder(root):
            return "run"
        return "other" if _entries(root) else "empty"
    return "new" if os.path.isdir(_existing(root)) else "file"


def _existing(root: str) -> str:
    """``root`` or the nearest folder above it that exists (a file, when one is in the way)."""
    while not os.path.lexists(root) and os.path.dirname(root) != root:
        root = os.path.dirname(root)
    return root


def _not_a_folder(root: str) -> str:
    above = _existing(root)
    what = "is a file" if above == root else f"lies under {above}, which is a file"
    return f"{root} {what}, not a folder; give -o a new folder for the run (it is created)"


def _fresh(root: str) -> str:
    """A folder name inside ``root`` that does not exist yet (``run1``, ``run2``, …)."""
    i = 1
    while os.path.lexists(os.path.join(root, f"run{i}")):
        i += 1
    return os.path.join(root, f"run{i}")


def _held(root: str) -> str:
    names = _entries(root)
    shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
    return f"it holds {shown}"


def check_launch_folder(path: str | os.PathLike[str], mode: str = "auto") -> str:
    """Check that a launch may write into ``path`` (before it loads, writes or moves anything).

    Args:
        path: the ``-o`` folder.
        mode: the launch's mode (``"auto"``, ``"resume"``, ``"restart"``): only its wording.

    Returns:
        :func:`folder_kind` of ``path``: ``"new"``, ``"empty"`` or ``"run"``.

    Raises:
        ConfigError: ``path`` is a file (or lies under one), a folder that holds files but
            is not a run, or the user's home or the file system's root (never a run folder) —
            one line naming the folder and suggesting a fresh ``-o`` folder.

    Example:
        >>> import tempfile
        >>> check_launch_folder(os.path.join(tempfile.mkdtemp(), "run"))
        'new'
    """
    root = _full(path)
    kind = folder_kind(root)
    if kind == "file":
        raise ConfigError(_not_a_folder(root))
    special = _special_folder(root)
    if special and kind != "run":  # (a home holds hidden files only: it looks empty)
        raise ConfigError(
            f"{root} is {special}; a launch writes its run folder's files at its top (and "
            f"removing the run would remove the folder), so it is refused. Give -o a folder "
            f"for the run, e.g. `-o {os.path.join(root, 'runs', 'run1')}`"
        )
    if kind == "other":
        config = os.path.join(root, _CONFIG)
        how = f"-c {config} " if os.path.isfile(config) else ""
        doing = (
            "--restart would move your files into previous/N/"
            if mode == "restart"
            else "a launch there would write its run among your files"
        )
        raise ConfigError(
            f"{root} is not a Kestrel run (no {RUN_FILE}) and is not empty ({_held(root)}); "
            f"{doing}, so it is refused. Give -o a new folder, e.g. "
            f"`kestrel launch {how}-o {_fresh(root)}`"
        )
    return kind


def _special_folder(root: str) -> str | None:
    """What ``root`` is when it must never be a run folder: the user's home, the file system's
    root; ``None`` otherwise."""
    real = os.path.realpath(root)
    if real == os.path.realpath(os.path.expanduser("~")):
        return "your home folder"
    if os.path.dirname(real) == real:
        return "the file system's root"
    return None


def check_run_folder(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` is a run a launch wrote, with its ``config.yml`` (for sampling).

    Raises:
        ConfigError: it is not a folder, not a run (a model folder: suggests launching a run
            from its ``config.yml`` into a new folder), or a run without ``config.yml``.
    """
    root = _full(path)
    kind = folder_kind(root)
    if kind == "file":
        raise ConfigError(f"{root} is not a run directory (not a folder)")
    config = os.path.join(root, _CONFIG)
    if kind == "other" and os.path.isfile(config):
        raise ConfigError(
            f"{root} is not a run directory (no {RUN_FILE}: its config.yml was not written by "
            f"a launch); train a run from it first: `kestrel launch -c {config} "
            f"-o {_fresh(root)}`"
        )
    if not os.path.isfile(config):
        raise ConfigError(
            f"{root}: not a run directory (no {_CONFIG}); start a run with "
            f"`kestrel launch -c CONFIG -o {root if kind != 'other' else _fresh(root)}`"
        )


def check_restart_keeps(path: str | os.PathLike[str], folders: list[str] | tuple[str, ...]) -> None:
    """Check that ``--restart`` of the run at ``path`` does not move the code it restarts with.

    Args:
        path: the run folder (its contents go to ``previous/N/``).
        folders: the new config's code folders (``paths.imports``).

    Raises:
        ConfigError: one of ``folders`` is the run folder or lies inside it.
    """
    root = os.path.realpath(_full(path))
    for folder in folders:
        real = os.path.realpath(folder)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            raise ConfigError(
                f"paths.imports: the code folder {folder} lies inside the run {root}, whose "
                f"contents --restart moves to {os.path.join(root, 'previous')}/N/; move the "
                "code out of the run folder first"
            )
