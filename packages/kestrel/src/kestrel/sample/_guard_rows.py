"""Observation rows of a batched sampling call (``(m, *D)`` observations, :mod:`._batch`):
the guards' warnings numbered by observation index and joined across graph calls.

The estimators' guards number the observations of one graph call; a batch is drawn in
several calls. :func:`renumber` maps a call's rows to the batch's observation indices,
:func:`merge_rows` joins the warnings that differ only in the rows they name, and
:func:`rows_text` is how a message names rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kestrel_core import ObservationWarning

__all__ = ["rows_text", "renumber", "merge_rows", "unique_findings"]


def rows_text(rows: Sequence[int], shown: int = 10) -> str:
    """``"observation row 3"``, ``"observation rows 0, 1, 2"`` (the first ``shown``, then a
    count)."""
    more = f" and {len(rows) - shown} more" if len(rows) > shown else ""
    listed = ", ".join(str(i) for i in rows[:shown])
    return f"observation row{'s' if len(rows) > 1 else ''} {listed}{more}"


_ROW = re.compile(r"observation row (\d+)")
_NODE = re.compile(r"^nodes? '[^']*'(?:, '[^']*')*: ")
_ROWS = re.compile(r"observation rows? \d+(?:, \d+)*(?: and \d+ more)?")


def renumber(note: ObservationWarning, runs: Sequence[Sequence[int]]) -> ObservationWarning:
    """A batched call's warning with its rows numbered by observation index.

    The estimators' guards number the observations of one graph call (its runs of identical
    rows of conditions, :mod:`kestrel_torch.estimators._guards`); a batch is drawn in several calls
    (:mod:`._batch`). ``runs[r]`` are the observations that run ``r`` of the call holds
    (several when consecutive observations are equal): each finding with ``row: r`` becomes one
    per observation, and ``observation row r`` in the message names them.
    """

    def of(r: int) -> list[int]:
        return list(runs[r]) if 0 <= r < len(runs) else [r]

    message = str(note)
    rows = [f.get("row") for f in note.findings]
    if len(runs) == 1 and rows and all(r is None for r in rows):
        # a call of one row of conditions: its observation is checked as a broadcast one
        message = _NODE.sub(lambda match: f"{match.group(0)}observation row 0: ", message, 1)
        note = ObservationWarning(message, [{**f, "row": 0} for f in note.findings])
    found: list[dict[str, Any]] = []
    for f in note.findings:
        row = f.get("row")
        if isinstance(row, int) and not isinstance(row, bool):
            found += [{**f, "row": i} for i in of(row)]
        else:
            found.append(f)
    message = _ROW.sub(lambda match: rows_text(of(int(match.group(1)))), message)
    return ObservationWarning(message, found)


def merge_rows(notes: Sequence[ObservationWarning]) -> list[ObservationWarning]:
    """One warning per message that differs only in the observation rows it names (a batch's
    equal observations seen in several calls): the rows and findings of each joined."""
    out: list[ObservationWarning] = []
    groups: dict[str, list[ObservationWarning]] = {}
    for note in notes:
        text = str(note)
        if len(_ROWS.findall(text)) != 1:
            out.append(note)
            continue
        key = _ROWS.sub("\0", text)
        if key not in groups:
            groups[key] = []
            out.append(note)  # a placeholder, replaced below
        groups[key].append(note)
    for key, same in groups.items():
        found = unique_findings([f for note in same for f in note.findings])
        rows = sorted({f["row"] for f in found if isinstance(f.get("row"), int)})
        joined = ObservationWarning(key.replace("\0", rows_text(rows)), found)
        out[out.index(same[0])] = joined if rows else same[0]
    return out


def unique_findings(found: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``found`` without repeats (equal as JSON), in order, as new dicts."""
    out, seen = [], set()
    for f in found:
        key = json.dumps(f, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(dict(f))
    return out
