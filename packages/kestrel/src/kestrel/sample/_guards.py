"""What a sampling call found about its observation, recorded with the samples and warned about.

Two sources of findings (JSON-ready dicts with ``node`` and ``kind``):

* **another observation** (``kind: "other_observation"``, :func:`other_observation`): an
  estimator trained with proposals (γ > 0 and not ``amortized``) spent its simulations near the
  run's own observation; its posterior at another observation rests on the few prior draws
  that reached there, and may be biased or too narrow. Sampling a run at another observation
  (``kestrel sample … --observation``, ``observation=`` of :func:`~kestrel.sample_run`, or
  a ``graph.<node>.observed`` override) warns for every such node; an estimator with
  ``amortized: true`` (prior draws only) is meant for many observations and does not.
* **the estimators' own guards** (``kind: "constant"`` or ``"far"``, see
  :mod:`kestrel_torch.estimators._guards`): the observation warnings they issue while drawing in this
  process (held back by :func:`capture`), or the ``observation_checks`` an estimator reports
  with the draws it made (on Ray, :func:`trace_findings`; later, from its status:
  :func:`status_findings`).

A batched call (``(m, *D)`` observations, :mod:`._batch`) is checked per observation: the
findings carry ``row``, the observation's index among the ``m`` (:mod:`._guard_rows`: the
estimators number the observations of one graph call), and the warnings name the rows.

Each is an :class:`~kestrel_core.graph._observe.ObservationWarning` carrying its findings.
:func:`record` keeps the findings with the sample file they concern — ``NNNNNN.json`` beside
``NNNNNN.npz`` (written only when something was found) and ``<samples>/observation_checks.json``
(latest per mode and observation; a launch copies it into its ``status.json``'s
``observation_checks``) — and then issues the warnings, so a
caller that turns warnings into errors still gets its samples written and recorded first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from kestrel.rundir._rundir import RunDir
from kestrel.rundir._samplefiles import observation_digest
from kestrel.sample._guard_rows import merge_rows, renumber, rows_text, unique_findings
from kestrel_core import GraphRunner, ObservationWarning, RunConfig, Spec
from kestrel_core.internal import write_atomic

__all__ = [
    "trains_with_proposals",
    "other_observation",
    "renumber",
    "merge_rows",
    "rows_text",
    "capture",
    "status_findings",
    "trace_findings",
    "record",
    "issue",
    "checks_file",
    "read_checks",
    "STATUS_KEY",
    "CHECKS_FILE",
]

#: the key of ``status.json`` (and of each ``NNNNNN.json``) that holds the findings of sampling
#: calls
STATUS_KEY = "observation_checks"
#: ``<samples>/observation_checks.json``: the latest findings per mode and observation
CHECKS_FILE = "observation_checks.json"


def _options(spec: Spec) -> dict[str, Any]:
    """An estimator spec's options: its class's defaults (``options_class``) and the config's
    keyword arguments, or a live instance's ``config``."""
    if spec.is_live:
        return dict(getattr(spec.target, "config", None) or {})
    options: dict[str, Any] = {}
    try:
        cls = spec.resolve()
    except Exception:  # unimportable here: the config's keywords alone decide
        cls = None
    defaults = getattr(cls, "options_class", None)
    if dataclasses.is_dataclass(defaults):
        for f in dataclasses.fields(defaults):
            if f.default is not dataclasses.MISSING:
                options[f.name] = f.default
    options.update(spec.kwargs)
    return options


def trains_with_proposals(spec: Spec | None) -> bool:
    """Whether an estimator spec trains on proposals focused on the run's observation.

    True when its ``gamma`` is a number > 0, it is not ``amortized`` and its ``max_epochs`` (if
    any) exceed its ``prior_epochs``. An estimator without a ``gamma`` option (not Kestrel's)
    is taken as not focused, and so is a node without an estimator (``None``).
    """
    if spec is None:
        return False
    opts = _options(spec)
    gamma = opts.get("gamma")
    if opts.get("amortized") is True or not isinstance(gamma, (int, float)) or gamma <= 0:
        return False
    max_epochs, prior_epochs = opts.get("max_epochs"), opts.get("prior_epochs", 0)
    if isinstance(max_epochs, int) and isinstance(prior_epochs, int):
        return max_epochs > prior_epochs
    return True


def _focused(config: RunConfig) -> list[str]:
    graph = config.graph
    return [m for m in graph.latents if trains_with_proposals(graph.nodes[m].estimator)]


def _differ(own: Mapping[str, Any], observed: Mapping[str, Any]) -> list[str] | None:
    """The observed nodes whose value is not the run's own; ``None``: the run's observation."""
    differ = [m for m in observed if m not in own or not _same(own[m], observed[m])]
    return None if not differ and set(own) == set(observed) else differ


def _message(focused: Sequence[str], run_digest: str, where: str) -> str:
    names = ", ".join(repr(m) for m in focused)
    keys = ", ".join(f"graph.{m}.estimator.amortized" for m in focused)
    return (
        f"node{'s' if len(focused) > 1 else ''} {names}: trained with proposals focused on "
        f"the run's observation ({run_digest}); sampled here at {where}, where its "
        "training data are the few prior draws that came near: the posterior may be "
        "biased or too narrow. For an estimator meant for many observations set "
        f"amortized: true ({keys}: prior draws only), or launch a run for this observation"
    )


def other_observation(
    run: RunDir,
    config: RunConfig,
    observed: Mapping[str, Any],
    overridden: bool,
    rows: Sequence[Mapping[str, Any]] | None = None,
) -> list[ObservationWarning]:
    """The warning for a run trained with proposals sampled at another observation.

    Args:
        run: the run. config: its config as loaded for this call (with the call's overrides).
        observed: every observed node → the ``x_o`` the draws are conditioned on.
        overridden: whether the call had config overrides (then the run's own observation is
            read again from ``RUN/config.yml`` without them).
        rows: for a batched call (:mod:`._batch`), each observation's ``observed`` (row ``i``
            of every batched node); each is checked, and the warning names the rows.

    Returns:
        ``[]`` when the observation (every row of a batch) is the run's own (equal values in
        any dtype, or the run's own rounded to the lower float precision it was given in) or
        no estimator trained with proposals;
        else one :class:`ObservationWarning` (not yet issued: :func:`record` does) naming the
        nodes and the remedy, with one finding per such node (per node and row of a batch:
        ``row`` the observation's index) (``kind: "other_observation"``, ``run_observation``
        and ``observation``: the two digests, ``nodes``: the observed nodes whose value
        differs).
    """
    own_config = run.load_config((), check_targets=()) if overridden else config
    own = dict(own_config.graph.observations)
    if not own or not observed:
        return []
    focused = _focused(config)
    if not focused:
        return []
    run_digest = observation_digest(own)
    found: list[dict[str, Any]] = []
    which: list[int] = []
    nodes: dict[str, None] = {}
    for i, one in enumerate([observed] if rows is None else rows):
        differ = _differ(own, one)
        if differ is None:
            continue
        which.append(i)
        nodes.update(dict.fromkeys(differ))
        base = {
            "kind": "other_observation",
            "nodes": differ,
            "run_observation": run_digest,
            "observation": observation_digest(one),
            **({} if rows is None else {"row": i}),
        }
        found += [{"node": m, **base} for m in focused]
    if not found:
        return []
    if rows is None:
        where = f"another observation ({found[0]['observation']}; differs in {', '.join(nodes)})"
    else:
        where = (
            f"other observations ({rows_text(which)} of {len(rows)}; "
            f"differ{'s' if len(which) == 1 else ''} in {', '.join(nodes)})"
        )
    return [ObservationWarning(_message(focused, run_digest, where), found)]


def _digest(value: Any) -> str:
    return observation_digest({"_": value})


def _same(own: npt.ArrayLike, given: npt.ArrayLike) -> bool:
    """Whether ``given`` is the run's own observation ``own``: equal values in any dtype
    (:func:`~kestrel.rundir._samplefiles.digest_form`), or ``own`` rounded to the lower float
    precision ``given`` holds it in (the run's float64 observation saved as float32)."""
    if _digest(own) == _digest(given):
        return True
    own, given = np.asarray(own), np.asarray(given)
    return (
        own.shape == given.shape
        and own.dtype.kind == "f"
        and given.dtype.kind == "f"
        and given.dtype.itemsize < own.dtype.itemsize
        and bool(np.array_equal(own.astype(given.dtype), given))
    )


@contextlib.contextmanager
def capture() -> Iterator[list[ObservationWarning]]:
    """Hold back the :class:`ObservationWarning` instances issued in the block.

    Inside, every observation warning is collected into the list yielded (each one, whatever
    the filters or the warning registry would do) instead of being shown; :func:`record`
    issues them again once the samples are written, through the caller's filters. Other
    warnings pass as they would.
    """
    caught: list[ObservationWarning] = []
    with warnings.catch_warnings():
        warnings.filterwarnings("always", category=ObservationWarning)
        shown = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if isinstance(message, ObservationWarning):
                caught.append(message)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield caught


def status_findings(
    dg: GraphRunner, nodes: Sequence[str], known: Sequence[ObservationWarning] = ()
) -> list[ObservationWarning]:
    """What the estimators of ``nodes`` report as ``observation_checks`` in their status now
    (for a caller that holds no trace of the draws, e.g. a launch's end samples): one
    :class:`ObservationWarning` per node that found something (none where an estimator reports
    nothing or does not answer), leaving out the findings of the ``known`` warnings."""
    try:
        status = dg.status()
    except Exception:  # the findings are a report: never fail a sampling call for them
        return []
    found: dict[str, list[dict[str, Any]]] = {}
    for m in nodes:
        entries = status.get(m)
        for entry in entries if isinstance(entries, list) else [entries]:
            checks = ((entry or {}).get("estimator") or {}).get(STATUS_KEY) or []
            found.setdefault(m, []).extend(dict(c) for c in checks if isinstance(c, Mapping))
    return _node_warnings(found, known)


def trace_findings(
    trace: Any, nodes: Sequence[str], known: Sequence[ObservationWarning] = ()
) -> list[ObservationWarning]:
    """What the estimators of ``nodes`` found at the draws of ``trace`` (a trace of a
    :class:`~kestrel_core.GraphRunner`, which returns them with the samples: its
    ``findings``), as :func:`status_findings` gives them — on Ray the estimators' warnings stay
    in the node actors' logs; in this process they may have been warned already (``known``)."""
    found = getattr(trace, "findings", None) or {}
    return _node_warnings({m: list(found.get(m) or ()) for m in nodes}, known)


def _node_warnings(
    found: Mapping[str, list[dict[str, Any]]], known: Sequence[ObservationWarning]
) -> list[ObservationWarning]:
    """One :class:`ObservationWarning` per node of ``found`` (node → findings) with a finding
    that no ``known`` warning carries."""
    seen = {json.dumps(f, sort_keys=True, default=str) for note in known for f in note.findings}
    out = []
    for m, items in found.items():
        items = [f for f in items if json.dumps(f, sort_keys=True, default=str) not in seen]
        if items:
            text = "; ".join(
                f"{f.get('kind')} {f.get('label')}"
                + (f" (observation row {f['row']})" if isinstance(f.get("row"), int) else "")
                + (f" (z = {f['z']:+.1f})" if isinstance(f.get("z"), float) else "")
                for f in items
            )
            message = (
                f"node {m!r}: the observation is unlike the training data: {text} "
                "(details in the node's log and in samples/observation_checks.json)"
            )
            out.append(ObservationWarning(message, items))
    return out


def record(
    run: RunDir,
    path: str,
    mode: str,
    digest: str | None,
    notes: Sequence[ObservationWarning],
) -> list[dict[str, Any]]:
    """Keep what one sampling call found with its sample file, then issue the warnings.

    Writes ``<file>.json`` beside the sample file ``<file>.npz`` (``{"mode", "observation",
    "observation_checks": [...]}``) and sets the entry ``"<mode>/<digest>"`` of
    ``<samples>/observation_checks.json`` (:func:`checks_file`) to ``{"file": <path relative
    to the run>, "findings": [...]}`` (nothing is written when nothing was found; a clean call
    removes that entry). ``status.json`` is never written here: it is the launch's. Each distinct
    warning is then issued once, pointing at the sampling call's caller.

    Args:
        run: the run. path: the sample file written. mode: its mode. digest: its observation's.
        notes: the warnings of the call (:func:`other_observation`, :func:`capture`,
            :func:`status_findings`).

    Returns:
        The findings, duplicates removed.
    """
    found = unique_findings([f for note in notes for f in note.findings])
    key = f"{mode}/{digest}" if digest else mode
    entries = read_checks(run)
    if found:
        meta = {"mode": mode, "observation": digest, STATUS_KEY: found}
        text = json.dumps(meta, indent=2, default=str) + "\n"
        write_atomic(os.path.splitext(path)[0] + ".json", text.encode())
        entries[key] = {"file": os.path.relpath(path, run.root), "findings": found}
    if found or key in entries:
        if not found:
            del entries[key]
        text = json.dumps(entries, indent=2, default=str) + "\n"
        write_atomic(checks_file(run), text.encode())
    issue(notes, stacklevel=3)
    return found


def checks_file(run: RunDir) -> str:
    """``<samples>/observation_checks.json``: the latest findings per mode and observation.

    Kept under the samples folder, not in ``status.json``: sampling never writes a file a
    launch writes (a launch may be running beside it, :mod:`kestrel.rundir._lock`); a launch
    copies the entries into its ``status.json`` (``observation_checks``)."""
    return os.path.join(run.samples, CHECKS_FILE)


def read_checks(run: RunDir) -> dict[str, Any]:
    """The entries of :func:`checks_file` (``"<mode>/<digest>"`` → ``{"file", "findings"}``);
    for a run sampled before that file existed, ``status.json``'s ``observation_checks``; an
    unreadable file counts as none (its entries are rewritten by the next sampling call)."""
    try:
        with open(checks_file(run), encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        try:
            data = run.read_status().get(STATUS_KEY)
        except (OSError, ValueError, AttributeError):  # status.json is an output: never stops
            data = None
    except (OSError, ValueError):
        data = None
    return dict(data) if isinstance(data, dict) else {}


def issue(notes: Sequence[ObservationWarning], stacklevel: int = 2) -> None:
    """Issue each distinct warning once, attributed to the first caller outside Kestrel's
    packages (the user's call, whatever wrappers lie between), at least ``stacklevel`` (as
    for :func:`warnings.warn`, counted from the caller of this function) up."""
    seen: set[str] = set()
    level = max(stacklevel + 1, _outside_kestrel())
    for note in notes:
        if str(note) not in seen:
            seen.add(str(note))
            warnings.warn(note, stacklevel=level)


def _outside_kestrel() -> int:
    """The ``stacklevel`` of :func:`warnings.warn` called in :func:`issue` that names the first
    frame outside Kestrel's packages."""
    roots = tuple(
        os.path.dirname(os.path.abspath(module.__file__)) + os.sep
        for name in ("kestrel", "kestrel_core", "kestrel_ray", "kestrel_torch")
        if (module := sys.modules.get(name)) is not None and module.__file__
    )
    frame: FrameType | None = sys._getframe(1)  # issue()
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(roots):
        frame, level = frame.f_back, level + 1
    return level
