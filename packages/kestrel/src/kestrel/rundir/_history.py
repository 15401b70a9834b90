"""``RUN/run.json``: the history of a run's launches, one entry per ``kestrel launch``.

::

    {"launches": [
      {"launch": 1, "mode": "new", "seed": 1234, "started": "2026-12-01T03:10:00Z",
       "ended": "2026-12-01T03:12:41Z", "status": "completed", "reason": null,
       "epochs": {"theta": 40}, "config_sha256": "…", "observations": {"x": "…"},
       "overrides": []},
      {"launch": 2, "mode": "resume", …}
    ]}

``mode`` is ``new`` (a fresh run directory), ``resume`` (the run's own config, plus
overrides) or ``restart`` (the old contents moved to ``RUN/previous/N/``). ``config_sha256`` is
the sha256 of the canonical YAML of the config the launch wrote to ``RUN/config.yml``
(:func:`kestrel.rundir._config.config_digest`), ``observations`` the digest of each
observation's values. An entry stays ``"running"`` until the launch ends; a failed one
always has a ``reason``. ``notes`` (only when there are any) keeps the warnings the launch gave
before it started (:mod:`._launch_notes`: a ``-c`` config ignored by ``--resume``, overrides
that change what the restored rows mean).

An empty or damaged ``run.json`` is never taken for an empty history (a new seed, launch 1
again): reading it raises :class:`~kestrel.rundir._runfiles.RunFileError` naming the file and
the remedy, and a resume checks it before it writes anything
(:func:`~kestrel.rundir._runfiles.check_resume_files`). Decided: refused, not rebuilt — the
seed is also in ``status.json``, but the launch count, which picks each launch's random
stream, is recorded only here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kestrel.rundir._runfiles import RunFileError, read_json, restart_remedy
from kestrel_core.internal import write_atomic

__all__ = ["RunHistory", "RUN_FILE", "failure_reason"]

RUN_FILE = "run.json"


def failure_reason(error: BaseException | None) -> str:
    """A failed launch's ``reason`` when it has none of its own: the exception's first line,
    with its type."""
    if error is None:
        return "the launch ended before training started (no error was reported)"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else '(no message)'}"


def read_output_json_quietly(path: str) -> dict[str, Any]:
    """A JSON object file, or empty when it is missing or unreadable (for a hint only)."""
    try:
        return read_json(path, "") or {}
    except RunFileError:
        return {}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RunHistory:
    """The launches recorded in ``RUN/run.json``.

    Args:
        path: the file (``RUN/run.json``).
    """

    def __init__(self, path: str):
        self.path = path

    def launches(self) -> list[dict[str, Any]]:
        """Every recorded launch, oldest first (empty when the file is missing: a run older than
        ``run.json``).

        A damaged file is never read as an empty history: that would give a resumed run a new
        seed and launch number 1 again (launch 1's random streams) and overwrite the history.
        A resume with an unreadable ``run.json`` is refused, naming the file and the remedy;
        it is not rebuilt from the other files (the launch count, which each launch's random
        stream depends on, is recorded nowhere else).

        Raises:
            RunFileError: the file is empty, not JSON, or not ``{"launches": [...]}``.
        """
        try:
            data = read_json(self.path, "")
        except RunFileError as err:  # the remedy (it reads status.json) only when needed
            raise RunFileError(err.path, err.problem, self._remedy()) from None
        if data is None:
            return []
        launches = data.get("launches")
        if not isinstance(launches, list):
            problem = 'expected {"launches": [...]}, found ' + (
                "no 'launches' list" if launches is None else f"'launches': {launches!r:.40}"
            )
            raise RunFileError(self.path, problem, self._remedy())
        return [e for e in launches if isinstance(e, dict)]

    def _remedy(self) -> str:
        root = os.path.dirname(os.path.abspath(self.path))
        seed = read_output_json_quietly(os.path.join(root, "status.json")).get("seed")
        known = f" (status.json says seed {seed})" if isinstance(seed, int) else ""
        return (
            f"it holds the run's seed{known} and launch history, which a resume continues and "
            f"never resets; restore it from a backup, {restart_remedy(root)}"
        )

    def first_seed(self) -> int | None:
        """The seed of the run's first recorded launch (``None`` without history)."""
        launches = self.launches()
        seed = launches[0].get("seed") if launches else None
        return int(seed) if isinstance(seed, int) else None

    def begin(self, **fields: Any) -> int:
        """Append an entry for a launch that starts now (status ``running``); returns its
        number (1 for the first).

        Raises:
            RunFileError: the file is damaged (:meth:`launches`); nothing is written.
        """
        launches = self.launches()
        number = len(launches) + 1
        launches.append(
            {"launch": number, "started": _now(), "ended": None, "status": "running", **fields}
        )
        self._write(launches)
        return number

    def end(self, number: int, **fields: Any) -> None:
        """Update entry ``number`` (e.g. ``status``, ``epochs``) and stamp its end time."""
        self.update(number, ended=_now(), **fields)

    def update(self, number: int, **fields: Any) -> None:
        """Update the fields of entry ``number`` (nothing when it is not there).

        Raises:
            RunFileError: the file is damaged (:meth:`launches`); nothing is written.
        """
        launches = self.launches()
        for entry in launches:
            if entry.get("launch") == number:
                entry.update(fields)
                self._write(launches)
                return

    def _write(self, launches: Sequence[Mapping[str, Any]]) -> None:
        text = json.dumps({"launches": list(launches)}, indent=2, default=str) + "\n"
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        write_atomic(self.path, text.encode("utf-8"))
