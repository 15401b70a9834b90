"""The simulation bank: every row a run's launches put into the store, kept on disk.

Simulations are the expensive part of a run, so none is thrown away. The buffer in Ray's
object store keeps at most ``max_samples`` training rows and evicts the oldest; the bank keeps
them all. It is the buffer journal (:mod:`._journal`) kept whole: every append the store
accepted is written as ``<buffer>/journal/<first id>-<last id>.npz``
(:func:`kestrel_core.store.write_journal`: one array per flat key ``(n, *D)`` — the node's
values and its ``log_prob``, the log-density of the distribution the row was drawn from —
``_ids``, ``_valid``, ``_sizes``), and no snapshot deletes those files any more. A resumed
launch still replays only the files beyond its snapshot's id count, as before.

Beside the chunks, ``<buffer>/journal/manifest.jsonl`` lists them, one JSON object a line
(appended and fsynced after the chunk's file is in place; a line cut short by a crash is
skipped on reading):

* ``{"kind": "digest", "digest", "graph", "code"}`` — once per launch, before its first chunk:
  the simulator digest of the launch's config (:mod:`._digest`);
* ``{"kind": "chunk", "file", "first", "last", "rows", "valid", "bytes", "origin", "round",
  "from_prior", "proposal_nodes", "digest"[, "sources"]}`` — one per chunk file: its id range,
  rows (valid of them), size on disk, where the rows came from (:data:`ORIGINS`; ``round``: the
  resimulation round ``k``), whether they are draws from the prior, the latent nodes whose
  values a proposal drew (the launch's estimator nodes; ``[]`` for prior draws), and the
  simulator digest they were made with. A chunk of reused rows (``origin: "reused"``) lists its
  ``sources``: ``{"run", "file", "origin", "round", "rows"}`` per chunk of the earlier run.

:func:`read_bank` reads the manifest back as a :class:`Bank`, whose :meth:`Bank.rows` reads a
row range by opening only the chunk files that hold it. With ``buffer.journal: false`` a launch
writes no journal, so it has no bank either.

What it costs: every row once more on disk (the snapshot ``buffer.npz`` holds the live buffer;
the bank holds every row ever appended, evicted ones included), about ``rows × bytes per row``
— ``budget.simulations`` rows for a run with a budget — written by the driver, which already
read every block for the journal; a line of JSON per append.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kestrel.persist._digest import SimulatorDigest
from kestrel_core.internal import disk_full_guard
from kestrel_core.store import JournalFile, journal_files, read_journal_file

__all__ = [
    "MANIFEST_FILE",
    "ORIGINS",
    "Bank",
    "BankChunk",
    "BankWriter",
    "origin_of",
    "read_bank",
]

#: the bank's table of contents, in the journal folder
MANIFEST_FILE = "manifest.jsonl"
#: where a chunk's rows came from: the rows of ``buffer.initial_samples_path`` (``kestrel
#: import``ed ones among them), the initial simulation from the prior, a resimulation round from
#: the proposals, the rest of the budget drawn after training ended, rows of an earlier run
ORIGINS = (
    "initial samples",
    "initial simulation",
    "resimulation",
    "end-of-budget draws",
    "reused",
)
_PRIOR = ("initial samples", "initial simulation")
_ROUND = re.compile(r"^(resimulation|end-of-budget draws) round (\d+)$")


def origin_of(what: str, latents: Sequence[str]) -> dict[str, Any]:
    """The manifest fields of an append the launch names ``what`` (``"initial simulation"``,
    ``"resimulation round 3"``, ``"end-of-budget draws round 9"``, …); ``latents``: the
    launch's estimator nodes, whose values a proposal draws."""
    match = _ROUND.match(what)
    if match:
        kind, k = match.group(1), int(match.group(2))
        return {"origin": kind, "round": k, "from_prior": False, "proposal_nodes": list(latents)}
    kind = what
    prior = kind in _PRIOR
    return {
        "origin": kind,
        "round": None,
        "from_prior": prior,
        "proposal_nodes": [] if prior else list(latents),
    }


class BankWriter:
    """Appends the manifest lines of one launch's chunks (see the module docstring).

    Args:
        folder: the journal folder. digest: the launch's simulator digest.
        latents: the launch's estimator nodes.
    """

    def __init__(
        self, folder: str | os.PathLike[str], digest: SimulatorDigest, latents: Sequence[str]
    ):
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, MANIFEST_FILE)
        self.digest = digest
        self.latents = list(latents)
        self._said = False

    def record(
        self,
        path: str,
        ids: np.ndarray,
        valid: int,
        origin: str | Mapping[str, Any],
    ) -> None:
        """Add the line of the chunk just written at ``path`` (ids ``ids``, ``valid`` of them
        valid); ``origin``: the append's name (:func:`origin_of`) or its fields.

        Raises:
            DiskFullError: the line cannot be written for lack of space.
            OSError: it cannot be written otherwise.
        """
        fields = origin_of(origin, self.latents) if isinstance(origin, str) else dict(origin)
        lines = []
        if not self._said:
            lines.append({"kind": "digest", **self.digest.record()})
        lines.append(
            {
                "kind": "chunk",
                "file": os.path.basename(path),
                "first": int(ids[0]),
                "last": int(ids[-1]),
                "rows": len(ids),
                "valid": int(valid),
                "bytes": os.path.getsize(path),
                **fields,
                "digest": self.digest.digest,
            }
        )
        self._append(lines)
        self._said = True

    def _append(self, lines: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(line, default=str) + "\n" for line in lines)
        with disk_full_guard(self.path):
            os.makedirs(self.folder, exist_ok=True)
            with open(self.path, "ab") as fh:
                if fh.tell() and not _ends_with_newline(self.path):
                    fh.write(b"\n")  # a line cut short before: it stays a line of its own
                fh.write(text.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


@dataclass(frozen=True)
class BankChunk:
    """One chunk of a bank, as its manifest line lists it.

    Attributes:
        path: the chunk file. first, last: its ids. rows: its rows; valid: of them, valid.
        bytes: its size when written. origin: one of :data:`ORIGINS`. round: the resimulation
        round (``None``: none). from_prior: draws from the prior. proposal_nodes: the nodes
        whose values a proposal drew. digest: the simulator digest it was made with.
        sources: for reused rows, the earlier run's chunks.
    """

    path: str
    first: int
    last: int
    rows: int
    valid: int
    bytes: int | None
    origin: str
    round: int | None
    from_prior: bool
    proposal_nodes: tuple[str, ...]
    digest: str
    sources: tuple[dict[str, Any], ...] = ()

    @property
    def file(self) -> str:
        """The chunk file's name."""
        return os.path.basename(self.path)


@dataclass
class Bank:
    """A run's bank, read back (:func:`read_bank`).

    Attributes:
        folder: the journal folder. chunks: in id order. digests: digest → its
        :class:`~kestrel.persist._digest.SimulatorDigest`. unlisted: chunk files the manifest
        does not list (written before the bank, or a crash between file and line).
        bad_lines: manifest lines that could not be read (numbers, 1-based).
    """

    folder: str
    chunks: list[BankChunk] = field(default_factory=list)
    digests: dict[str, SimulatorDigest] = field(default_factory=dict)
    unlisted: list[str] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows of the listed chunks."""
        return sum(c.rows for c in self.chunks)

    @property
    def valid(self) -> int:
        """Valid rows of the listed chunks."""
        return sum(c.valid for c in self.chunks)

    def damaged(self) -> list[str]:
        """The listed chunk files that are missing or whose size is not what was written
        (one line each)."""
        out = []
        for chunk in self.chunks:
            try:
                size = os.path.getsize(chunk.path)
            except OSError:
                out.append(f"{chunk.path} is missing")
                continue
            if chunk.bytes is not None and size != chunk.bytes:
                out.append(f"{chunk.path} has {size} bytes, {chunk.bytes} were written")
        return out

    def read(self, chunk: BankChunk) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """A chunk's rows: ``(flat key → (rows, *D), valid bool (rows,))``.

        Raises:
            StoreError: the file cannot be read or does not hold what its name says (names it).
        """
        block = read_journal_file(JournalFile(chunk.first, chunk.last, chunk.path))
        return block.arrays, block.valid

    def rows_between(
        self, start: int, stop: int, keys: Sequence[str] | None = None, *, valid_only: bool = True
    ) -> dict[str, np.ndarray]:
        """The rows with ids in ``[start, stop)``, reading only the chunks that hold them.

        Args:
            start, stop: the id range. keys: the flat keys to read (``None``: every key).
            valid_only: leave out the rows appended invalid.

        Returns:
            flat key → ``(m, *D)`` in id order, plus ``"_ids"`` int64 ``(m,)`` (ids no listed
            chunk holds are absent).

        Raises:
            StoreError: a chunk cannot be read (names it).
        """
        firsts = [c.first for c in self.chunks]
        i = max(0, bisect.bisect_right(firsts, int(start)) - 1)
        parts: dict[str, list[np.ndarray]] = {}
        ids: list[np.ndarray] = []
        for chunk in self.chunks[i:]:
            if chunk.first >= stop:
                break
            if chunk.last < start:
                continue
            arrays, valid = self.read(chunk)
            chunk_ids = np.arange(chunk.first, chunk.last + 1, dtype=np.int64)
            keep = (chunk_ids >= start) & (chunk_ids < stop)
            if valid_only:
                keep &= valid
            ids.append(chunk_ids[keep])
            for key in keys if keys is not None else sorted(arrays):
                parts.setdefault(key, []).append(arrays[key][keep])
        out = {k: np.concatenate(v) for k, v in parts.items()}
        out["_ids"] = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        return out


def read_bank(folder: str | os.PathLike[str]) -> Bank | None:
    """The bank in a journal folder; ``None`` when it has no manifest (no bank).

    Raises:
        OSError: the manifest cannot be read.
    """
    folder = os.fspath(folder)
    path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.isfile(path):
        return None
    bank = Bank(folder)
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().split("\n")
    listed: dict[str, BankChunk] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if data.get("kind") == "digest":
                digest = SimulatorDigest.from_record(data)
                bank.digests[digest.digest] = digest
            elif data.get("kind") == "chunk":
                chunk = _chunk(folder, data)
                listed[chunk.file] = chunk
        except (ValueError, TypeError, KeyError, AttributeError):
            bank.bad_lines.append(number)
    bank.chunks = sorted(listed.values(), key=lambda c: c.first)
    with contextlib.suppress(OSError):
        for file in journal_files(folder):
            if file.complete and os.path.basename(file.path) not in listed:
                bank.unlisted.append(file.path)
    return bank


def _chunk(folder: str, data: Mapping[str, Any]) -> BankChunk:
    first, last = int(data["first"]), int(data["last"])
    name = str(data["file"])
    if name != f"{first}-{last}.npz" or last < first:
        raise ValueError(f"chunk {name!r} does not hold ids {first}…{last}")
    size = data.get("bytes")
    rnd = data.get("round")
    return BankChunk(
        path=os.path.join(folder, name),
        first=first,
        last=last,
        rows=int(data["rows"]),
        valid=int(data["valid"]),
        bytes=None if size is None else int(size),
        origin=str(data["origin"]),
        round=None if rnd is None else int(rnd),
        from_prior=bool(data["from_prior"]),
        proposal_nodes=tuple(str(n) for n in data.get("proposal_nodes") or ()),
        digest=str(data["digest"]),
        sources=tuple(dict(s) for s in data.get("sources") or ()),
    )
