"""Import directories of the driver, as a node actor on another machine finds them.

Node actors put the driver's import directories on ``sys.path`` before they build a node's
simulator and estimator. On a cluster the user's folder travels as Ray's ``working_dir``
(:mod:`kestrel.session._code`) and is unpacked elsewhere; the driver names that folder in the
actors' environment (:data:`SHIPPED_FROM_VAR`), and :func:`local_import_paths` maps the
driver's directories under it onto the unpacked copy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from kestrel_core import Spec

__all__ = ["SHIPPED_FROM_VAR", "local_import_paths", "local_spec"]

#: environment variable of the node actors: the driver's path of the shipped folder
SHIPPED_FROM_VAR = "KESTREL_SHIPPED_FROM"


def local_import_paths(
    paths: Sequence[str], environ: Mapping[str, str] | None = None, cwd: str | None = None
) -> list[str]:
    """The driver's import directories as this process finds them (in a node actor).

    A directory under the shipped folder (:data:`SHIPPED_FROM_VAR`) is mapped onto the
    unpacked copy (the actor's working directory); others are kept.

    Args:
        paths: the driver's import directories (absolute).
        environ: the environment (default ``os.environ``). cwd: the working directory.

    Returns:
        The directories to put on ``sys.path``, in order.
    """
    env = os.environ if environ is None else environ
    shipped = env.get(SHIPPED_FROM_VAR)
    here = os.getcwd() if cwd is None else cwd
    out = []
    for path in paths:
        if shipped:  # the shipped copy wins, even over a stale folder at the driver's path
            rel = os.path.relpath(path, shipped)
            if rel == "." or not rel.startswith(".."):
                path = os.path.normpath(os.path.join(here, rel))
        out.append(path)
    return out


def local_spec(spec: Spec) -> Spec:
    """``spec`` with its import directories (the driver's ``paths.imports``) as this process
    finds them (:func:`local_import_paths`).

    On a machine that does not see the driver's folders, the driver's paths name nothing, so
    the import of ``model.Signal`` would go to whatever ``model`` comes first on ``sys.path`` —
    a ``model.py`` in the folder the driver was started from, say — instead of the shipped
    copy of the config's folder; with the mapped directories the shipped copy comes first and
    a ``model`` loaded from elsewhere is replaced
    (:func:`kestrel_core.config._instantiate.import_target`).
    """
    if not spec.imports:
        return spec
    return dataclasses.replace(spec, imports=tuple(local_import_paths(list(spec.imports))))
