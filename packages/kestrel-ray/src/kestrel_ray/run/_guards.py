"""What a sampling call found about its observation, warned about and recorded with the samples.

Two sources of findings (JSON-ready dicts with ``node`` and ``kind``):

* **another observation** (``kind: "other_observation"``, :func:`other_observation`): an
  estimator trained with proposals (γ > 0 and not ``amortized``) spent its simulations near the
  run's own observation; its posterior at another observation rests on the few prior draws that
  reached there, and may be biased or too narrow. Sampling a run at another observation (``kestrel
  sample … --observation``, ``observation=`` of :func:`~kestrel_ray.sample_run`, or a
  ``graph.<node>.observed`` override) warns for every such node; an estimator with
  ``amortized: true`` (prior draws only) is meant for many observations and does not.
* **the estimators' own guards** (``kind: "constant"`` or ``"far"``, see
  :mod:`kestrel_torch._guards`): :class:`~kestrel_core._observe.ObservationWarning` instances raised
  while drawing in this process (:func:`capture`), or the ``observation_checks`` an estimator's
  status reports (on Ray, :func:`status_findings`).

Every finding is also an :class:`~kestrel_core._observe.ObservationWarning` the caller sees.
:func:`record` keeps them with the sample file they concern: ``NNNNNN.json`` beside
``NNNNNN.npz`` (written only when something was found) and ``status.json``'s
``observation_checks`` (latest per mode and observation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kestrel_core import RunConfig
from kestrel_core._files import write_atomic
from kestrel_core._observe import ObservationWarning
from kestrel_core._samplefiles import observation_digest

from ._rundir import RunDir

__all__ = [
    "trains_with_proposals",
    "other_observation",
    "capture",
    "status_findings",
    "record",
    "STATUS_KEY",
]

#: the key of ``status.json`` that holds the findings of sampling calls
STATUS_KEY = "observation_checks"


def _options(spec: Any) -> dict[str, Any]:
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


def trains_with_proposals(spec: Any) -> bool:
    """Whether an estimator spec trains on proposals focused on the run's observation.

    True when its ``gamma`` is a number > 0, it is not ``amortized`` and its ``max_epochs`` (if
    any) exceed its ``prior_epochs``. An estimator without a ``gamma`` option (not Kestrel's)
    is taken as not focused.
    """
    opts = _options(spec)
    gamma = opts.get("gamma")
    if opts.get("amortized") is True or not isinstance(gamma, (int, float)) or gamma <= 0:
        return False
    max_epochs, prior_epochs = opts.get("max_epochs"), opts.get("prior_epochs", 0)
    if isinstance(max_epochs, int) and isinstance(prior_epochs, int):
        return max_epochs > prior_epochs
    return True


def other_observation(
    run: RunDir, config: RunConfig, observed: Mapping[str, Any], overridden: bool
) -> list[dict[str, Any]]:
    """Warn when a run trained with proposals is sampled at another observation.

    Args:
        run: the run. config: its config as loaded for this call (with the call's overrides).
        observed: every observed node → the ``x_o`` the draws are conditioned on.
        overridden: whether the call had config overrides (then the run's own observation is
            read again from ``RUN/config.yml`` without them).

    Returns:
        One finding per estimator node trained with proposals (``kind: "other_observation"``,
        ``run_observation`` and ``observation``: the two digests, ``nodes``: the observed
        nodes whose value differs); empty when the observation is the run's own.

    Warns:
        ObservationWarning: with the findings, naming the nodes and the remedy.
    """
    own_config = run.load_config((), check_targets=()) if overridden else config
    own = dict(own_config.graph.observations)
    if not own or not observed or observation_digest(own) == observation_digest(observed):
        return []
    differ = [m for m in observed if m not in own or _digest(observed[m]) != _digest(own[m])]
    graph = config.graph
    focused = [m for m in graph.latents if trains_with_proposals(graph.nodes[m].estimator)]
    if not focused:
        return []
    base = {
        "kind": "other_observation",
        "nodes": differ,
        "run_observation": observation_digest(own),
        "observation": observation_digest(observed),
    }
    found = [{"node": m, **base} for m in focused]
    names = ", ".join(repr(m) for m in focused)
    keys = ", ".join(f"graph.{m}.estimator.amortized" for m in focused)
    warnings.warn(
        ObservationWarning(
            f"node{'s' if len(focused) > 1 else ''} {names}: trained with proposals focused on "
            f"the run's observation ({base['run_observation']}); sampled here at another "
            f"observation ({base['observation']}; differs in {', '.join(differ)}), where its "
            "training data are the few prior draws that came near: the posterior may be "
            "biased or too narrow. For an estimator meant for many observations set "
            f"amortized: true ({keys}: prior draws only), or launch a run for this observation",
            found,
        ),
        stacklevel=3,
    )
    return found


def _digest(value: Any) -> str:
    return observation_digest({"_": value})


@contextlib.contextmanager
def capture() -> Iterator[list[dict[str, Any]]]:
    """Collect the findings of the :class:`ObservationWarning` instances raised in the block.

    Every warning raised inside is shown again afterwards as it would have been (so callers and
    filters still see it); the list yielded receives the findings of the observation warnings.
    """
    found: list[dict[str, Any]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    for w in caught:
        if isinstance(w.message, ObservationWarning):
            found.extend(w.message.findings)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def status_findings(dg: Any, nodes: Sequence[str]) -> list[dict[str, Any]]:
    """The ``observation_checks`` the estimators of ``nodes`` report in their status (a
    deployed graph on Ray; empty where an estimator reports none or does not answer)."""
    try:
        status = dg.status()
    except Exception:  # the findings are a report: never fail a sampling call for them
        return []
    found: list[dict[str, Any]] = []
    for m in nodes:
        entries = status.get(m)
        for entry in entries if isinstance(entries, list) else [entries]:
            checks = ((entry or {}).get("estimator") or {}).get(STATUS_KEY) or []
            found.extend(dict(c) for c in checks if isinstance(c, Mapping))
    return found


def _unique(found: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out, seen = [], set()
    for f in found:
        key = json.dumps(f, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(dict(f))
    return out


def record(
    run: RunDir, path: str, mode: str, digest: str | None, found: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Keep the findings of one sampling call with its sample file.

    Writes ``<file>.json`` beside the sample file ``<file>.npz`` (``{"mode", "observation",
    "observation_checks": [...]}``) and sets ``status.json``'s ``observation_checks`` entry
    ``"<mode>/<digest>"`` to ``{"file": <path relative to the run>, "findings": [...]}``
    (nothing is written when nothing was found; a clean call removes that entry).

    Returns:
        The findings, duplicates removed.
    """
    found = _unique(found)
    key = f"{mode}/{digest}" if digest else mode
    status = run.read_status()
    entries = dict(status.get(STATUS_KEY) or {})
    if found:
        meta = {"mode": mode, "observation": digest, STATUS_KEY: found}
        text = json.dumps(meta, indent=2, default=str) + "\n"
        write_atomic(os.path.splitext(path)[0] + ".json", text.encode())
        entries[key] = {"file": os.path.relpath(path, run.root), "findings": found}
    elif key not in entries:
        return found
    else:
        del entries[key]
    status[STATUS_KEY] = entries
    run.write_status(status)
    return found
