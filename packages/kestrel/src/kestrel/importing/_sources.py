"""Reading the arrays ``kestrel import`` brings in: one per node, from a file, a key of an
``.npz``, a folder of shards, or an array given in Python.

=========================  =====================================================================
``NODE=FILE.npy``          the array in the file (``numpy.save``)
``NODE=FILE.npz:key``      the array ``key`` of the archive (``numpy.savez``); ``FILE.npz`` alone:
                           its only array, or the one named after the node
``NODE=FOLDER``            every ``.npy`` file of the folder, or every ``.npz`` file (the array
                           named after the node, or ``FOLDER:key``), concatenated along the
                           first axis in name order (shards of a campaign)
=========================  =====================================================================

Every file is read in full and without pickle; a file numpy cannot read (cut short, damaged,
pickled objects, another format) is one problem naming the node and the file. Shape symbols:
n rows, D a node's per-sample shape.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from kestrel.rundir._runfiles import npz_problem

#: a node's rows as given: a file spec (``FILE.npy``, ``FILE.npz:key``) or an array-like
SourceSpec: TypeAlias = str | os.PathLike[str] | npt.ArrayLike

__all__ = ["Source", "read_sources", "split_pair"]

_SUFFIXES = (".npy", ".npz")


@dataclass
class Source:
    """One node's rows as given.

    Attributes:
        node: the node. label: the file (or ``"an array"``) as messages name it.
        array: the rows, ``(n, *D)`` (``None`` when they could not be read).
        problem: why they could not be read (``None``: read).
        files: the files read (a folder: each shard).
    """

    node: str
    label: str
    array: np.ndarray | None = None
    problem: str | None = None
    files: tuple[str, ...] = ()


def split_pair(text: str) -> tuple[str, str]:
    """``"theta=sims/theta.npy"`` → ``("theta", "sims/theta.npy")``.

    Raises:
        ValueError: no ``=``, or nothing on one side of it.
    """
    node, sep, spec = text.partition("=")
    if not sep or not node or not spec:
        raise ValueError(f"expected NODE=FILE, got {text!r}")
    return node.strip(), spec


def read_sources(given: Mapping[str, SourceSpec]) -> dict[str, Source]:
    """node → :class:`Source` for each entry of ``given`` (node → path spec or array-like)."""
    return {node: _read(node, spec) for node, spec in given.items()}


def _read(node: str, spec: SourceSpec) -> Source:
    if not isinstance(spec, (str, os.PathLike)):
        try:
            array = np.asarray(spec)
        except (TypeError, ValueError) as err:
            return Source(node, "an array", problem=f"not an array ({err})")
        return Source(node, "an array", array=array)
    text = os.fspath(spec)
    path, key = _split_key(text)
    full = os.path.abspath(os.path.expanduser(path))
    label = text
    try:
        if os.path.isdir(full):
            array, files = _read_folder(node, full, key)
            return Source(node, label, array=array, files=files)
        if not os.path.exists(full):
            return Source(node, label, problem=f"{full} does not exist")
        if full.endswith(".npy"):
            if key is not None:
                return Source(node, label, problem="a .npy file holds one array: drop ':key'")
            return Source(node, label, array=_load_npy(full), files=(full,))
        if full.endswith(".npz"):
            return Source(node, label, array=_load_npz(full, node, key), files=(full,))
        return Source(
            node,
            label,
            problem="expected a .npy file, FILE.npz:key or a folder of .npy / .npz shards",
        )
    except _Unreadable as err:
        return Source(node, label, problem=str(err))


class _Unreadable(Exception):
    """A file (or shard) that cannot be read; the message names it and says why."""


def _split_key(text: str) -> tuple[str, str | None]:
    """``"a.npz:x"`` → ``("a.npz", "x")``; a folder ``"shards:x"`` too; otherwise no key (a
    path that exists as given keeps its colons)."""
    head, sep, key = text.rpartition(":")
    if not sep or not key or os.path.exists(os.path.expanduser(text)):
        return text, None
    if head.endswith(".npz") or os.path.isdir(os.path.expanduser(head)):
        return head, key
    return text, None


def _load_npy(path: str) -> np.ndarray:
    try:
        return np.asarray(np.load(path, allow_pickle=False))
    except (OSError, ValueError, EOFError) as err:
        raise _Unreadable(f"{path}: {npz_problem(err)}") from None


def _load_npz(path: str, node: str, key: str | None) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as data:
            names = list(data.files)
            if key is None:
                if node in names:
                    key = node
                elif len(names) == 1:
                    key = names[0]
                else:
                    raise _Unreadable(
                        f"{path} holds {len(names)} arrays ({', '.join(names) or 'none'}) and "
                        f"none is named {node!r}: give the key, {node}={path}:KEY"
                    )
            if key not in names:
                raise _Unreadable(
                    f"{path} has no array {key!r} (it holds {', '.join(names) or 'none'})"
                )
            return np.asarray(data[key])
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise _Unreadable(f"{path}: {npz_problem(err)}") from None


def _read_folder(node: str, folder: str, key: str | None) -> tuple[np.ndarray, tuple[str, ...]]:
    """The shards of ``folder`` concatenated in name order."""
    files = sorted(
        os.path.join(folder, f)
        for f in os.listdir(folder)
        if f.endswith(_SUFFIXES) and not f.startswith(".")
    )
    if not files:
        raise _Unreadable(f"{folder} holds no .npy or .npz shard")
    shards: list[np.ndarray] = []
    for file in files:
        if file.endswith(".npy"):
            if key is not None:
                raise _Unreadable(f"{file}: a .npy shard holds one array; drop ':{key}'")
            shard = _load_npy(file)
        else:
            shard = _load_npz(file, node, key or node)
        if shard.ndim == 0:
            raise _Unreadable(f"{file}: a single value, not rows (expected (n, ...))")
        if shards and shard.shape[1:] != shards[0].shape[1:]:
            raise _Unreadable(
                f"{file}: rows of shape {shard.shape[1:]}, but the shard {files[0]} has "
                f"{shards[0].shape[1:]}; the shards of a node must agree"
            )
        shards.append(shard)
    return np.concatenate(shards, axis=0), tuple(files)
