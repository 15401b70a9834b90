"""May Kestrel write this file? The rule for the output paths a user names.

``kestrel simulate -o OUT``, ``kestrel plot --image IMAGE`` and ``kestrel export --to OUT`` write
where they are told, but never over a file Kestrel did not write: a path that already exists
is refused in one line naming it, unless it lies inside the run folder (Kestrel's own plots
and exports there may be replaced) or the user passes ``--force``. A folder given where a file
is expected, or a path under a file, is a one-line error whatever ``--force`` says.

Pure standard library, tested without Ray.
"""

from __future__ import annotations

import os

from kestrel_core import ConfigError

__all__ = ["check_output_file", "inside"]


def inside(path: str | os.PathLike[str], folder: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (links resolved)."""
    real = os.path.realpath(os.fspath(path))
    root = os.path.realpath(os.fspath(folder))
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _existing(path: str) -> str:
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _run_record(path: str, run_dir: str) -> str | None:
    """What ``path`` is to the run when it is one of the run's records (never replaced by a
    plot or an export without ``--force``): its config, its markers, its sample files."""
    from kestrel.rundir._folder import RUN_MARKERS

    root = os.path.realpath(run_dir)
    real = os.path.realpath(path)
    if os.path.dirname(real) == root and os.path.basename(real) in (*RUN_MARKERS, "config.yml"):
        return f"the run's own {os.path.basename(real)}"
    if inside(real, os.path.join(root, "samples")):
        return "one of the run's sample files"
    return None


def check_output_file(
    path: str | os.PathLike[str],
    flag: str,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> str:
    """Check that a command may write the file ``path`` (before anything is written).

    Args:
        path: the file the command is about to write.
        flag: the option that named it (``--to``, ``--image``, ``-o``), for the message.
        run_dir: the run the command writes for: files inside it may be replaced.
        force: the user's ``--force``: an existing file may be replaced.

    Returns:
        ``path`` made absolute.

    Raises:
        ConfigError: ``path`` is a folder, lies under a file, or exists outside ``run_dir``
            without ``force`` — one line naming it.

    Example:
        >>> import tempfile
        >>> check_output_file(os.path.join(tempfile.mkdtemp(), "a.nc"), "--to").endswith("a.nc")
        True
    """
    text = os.fspath(path)
    full = os.path.abspath(text)
    if os.path.isdir(full) or text.endswith(("/", os.sep)):
        raise ConfigError(f"{flag} {full} is a folder; give {flag} a file name")
    above = _existing(os.path.dirname(full))
    if not os.path.isdir(above):
        raise ConfigError(f"{flag} {full} lies under {above}, which is a file, not a folder")
    if os.path.lexists(full) and not force:
        if run_dir is not None and inside(full, run_dir):
            record = _run_record(full, os.fspath(run_dir))
            if record is None:
                return full
            raise ConfigError(
                f"{flag} {full} is {record}; it is not replaced (give {flag} a new name, or "
                "add --force to replace it)"
            )
        where = "" if run_dir is None else " outside the run"
        raise ConfigError(
            f"{flag} {full} already exists{where}; it is not replaced "
            f"(give {flag} a new name, or add --force to replace it)"
        )
    return full
