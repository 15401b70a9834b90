"""Which run folders the user trusts: ``--trust`` (Python: ``trust=True``) for one command.

A run folder's ``config.yml`` may have been written by someone else (a folder copied from a
colleague, unpacked from an archive, downloaded with a paper): Kestrel cannot tell who wrote
a folder — copying or unpacking one makes it the user's — so it never guesses. Every command
that builds what a run folder's config names (``kestrel launch -o RUN`` on an existing run,
``sample``, ``check``, and ``-c`` naming a run folder's ``config.yml``) loads it with
``trust=False`` (:func:`kestrel_core.load_config`): only Kestrel's config classes and the
code of the run's code folders, checked before anything is imported. The user says a run is
trusted for the length of one command: the entry points (:func:`kestrel.launch`,
:func:`kestrel.sample_run`, ``check_calibration``) wrap their work in :func:`trusted_run`, and
every load of that run's config inside it (:func:`is_trusted`) is trusted. ``kestrel plot``
and ``kestrel export`` read a run's config as data (never import from it) and need no trust.

A fresh ``kestrel launch -c my/config.yml`` is the user's own config: not restricted.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["trusted_run", "is_trusted", "config_trust", "trust_keyword"]

F = TypeVar("F", bound=Callable[..., Any])

#: real paths of the run folders trusted in this context
_TRUSTED: ContextVar[frozenset[str]] = ContextVar("kestrel_trusted_runs", default=frozenset())


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(os.fspath(path))))


@contextlib.contextmanager
def trusted_run(run_dir: str | os.PathLike[str], trust: bool = True) -> Iterator[None]:
    """Within the block, the run folder ``run_dir`` is trusted when ``trust`` is true (else
    nothing changes)."""
    if not trust:
        yield
        return
    token = _TRUSTED.set(_TRUSTED.get() | {_key(run_dir)})
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def is_trusted(run_dir: str | os.PathLike[str]) -> bool:
    """Whether the run folder ``run_dir`` is trusted here (inside :func:`trusted_run`)."""
    return _key(run_dir) in _TRUSTED.get()


def config_trust(config: object) -> tuple[bool, str | None]:
    """``(trust, origin)`` for loading ``config`` given as a launch's or command's config:
    a path to the ``config.yml`` of a run folder (a folder a launch wrote) is that run's config
    — trusted only inside :func:`trusted_run` — anything else is the user's own."""
    from kestrel.rundir._folder import is_run_folder

    if not isinstance(config, (str, os.PathLike)):
        return True, None
    path = os.path.abspath(os.path.expanduser(os.fspath(config)))
    folder = os.path.dirname(path)
    if os.path.basename(path) == "config.yml" and is_run_folder(folder):
        return is_trusted(folder), path
    return True, None


def trust_keyword(func: F) -> F:
    """Decorate an entry point that takes ``run_dir`` and ``trust=False``: its whole call runs
    inside :func:`trusted_run` (``run_dir``, ``trust``), so every load of the run's config it
    makes, however deep, follows the user's word."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs).arguments
        run_dir, trust = bound.get("run_dir"), bool(bound.get("trust", False))
        if run_dir is None or not trust:
            return func(*args, **kwargs)
        with trusted_run(run_dir, trust):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
