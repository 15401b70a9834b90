"""``kestrel check calibration``: is the trained posterior calibrated around the observation?

1. **Truths.** ``n`` parameter sets θ* from the run's final proposal at its observation
   (``source="proposal"``, the default: the region the estimator was trained for) or from the
   prior (``source="prior"``, for an estimator trained on the whole prior, ``amortized``), and
   every other node simulated from them through the run's graph: x*. Where
   ``kestrel sample`` would (in this process unless ``--ray``, ``--address``, ``ray.address``
   or a simulated node with ``num_actors > 1`` asks for Ray; :func:`~._sampling.needs_ray`).
   Simulations with a non-finite observed value are dropped (counted in ``dropped``), so are
   those whose simulation raised in a node with ``on_error: skip`` (``skipped``: per node).
2. **Posteriors.** ``samples`` posterior draws for every x*, in batched calls
   (:func:`~._batch.run_batch`), with their log densities; the estimator's ``log_prob`` of each
   θ* given its x*. Always in this process: the estimators are loaded here, as for sampling.
   Several latent nodes are scored jointly (the sum of their log densities, each given its
   evidence). Densities are taken in the prior's standard-normal coordinates, where the
   estimators draw (:func:`_in_normal_space`).
3. **Figures** (:func:`kestrel_core.diagnostics._calibration.calibration_report`): expected coverage of
   highest-density regions at levels 0.05 … 0.95 with its binomial band and verdict, SBC ranks
   per component, TARP (its reference points drawn from the prior). Written to
   ``RUN/checks/calibration.json`` and drawn to ``RUN/checks/calibration.png`` (when
   matplotlib is installed).

With θ* from the proposal this is a *local* check: for a prior that is nearly flat over the
proposal (the data dominate), exact posteriors cover their truths at the nominal rate for any
θ*; an informative prior makes even the exact posterior deviate somewhat. TARP's references
come from the prior: where the prior is not much wider than the posterior, TARP in a local check
reads even an exact posterior as underconfident (see
:func:`~kestrel_core.diagnostics._calibration.tarp_coverage`); the verdict is the HPD coverage's.
``--from prior`` is simulation-based calibration proper, meaningful for an estimator trained on
the prior.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kestrel.rundir._read import node_labels
from kestrel.rundir._rundir import RunDir
from kestrel.rundir._trust import trust_keyword
from kestrel.sample._batch import run_batch
from kestrel.sample._guards import trains_with_proposals
from kestrel.sample._sampling import _open, _require_weights, needs_ray
from kestrel_core import (
    ConfigError,
    EstimatorError,
    Graph,
    RunConfig,
    calibration_report,
    check_count,
    flat_key,
    seed_sequence,
)
from kestrel_core.internal import (
    SkipLog,
    build_simulator,
    forward_plan,
    inference_plan,
    resimulation_plan,
    write_atomic,
)

if TYPE_CHECKING:  # imported where used: the check runs without Ray unless asked
    from kestrel.session._local import LocalTrace
    from kestrel_ray import RefTrace

__all__ = ["CalibrationResult", "check_calibration", "SOURCES", "CHECKS_DIR"]

#: where θ* comes from
SOURCES = ("proposal", "prior")
#: the run's folder of check reports
CHECKS_DIR = "checks"


@dataclass(frozen=True)
class CalibrationResult:
    """What :func:`check_calibration` wrote and found.

    Attributes:
        path: ``RUN/checks/calibration.json``. image: ``calibration.png`` (``None`` without
        matplotlib). verdict: ``calibrated``, ``overconfident`` or ``underconfident``.
        max_deviation: the largest |coverage − level|. n: truths used. samples: draws per
        truth. source: ``proposal`` or ``prior``. seed: the seed used. ray: whether the truths
        were simulated on Ray. wall_time: seconds. report: the JSON's contents.
    """

    path: str
    image: str | None
    verdict: str
    max_deviation: float
    n: int
    samples: int
    source: str
    seed: int
    ray: bool
    wall_time: float
    report: dict[str, Any] = field(repr=False, default_factory=dict)
    skipped: SkipLog = field(repr=False, default_factory=SkipLog)  # on_error: skip


@trust_keyword
def check_calibration(
    run_dir: str | os.PathLike[str],
    *,
    n: int = 200,
    samples: int = 1000,
    source: str = "proposal",
    seed: int | None = None,
    overrides: Iterable[str] = (),
    address: str | None = None,
    ray: bool | None = None,
    image: bool = True,
    trust: bool = False,
) -> CalibrationResult:
    """Check the calibration of a trained run; write ``RUN/checks/calibration.json`` and
    ``.png`` (see the module docstring).

    Args:
        run_dir: a run directory with saved weights.
        n: truths θ* (simulations) to check on (≥ 2).
        samples: posterior draws per truth (≥ 10).
        source: ``"proposal"`` (θ* from the final proposal at the run's observation) or
            ``"prior"``.
        seed: seed of every draw (``None``: fresh entropy, recorded in the report).
        overrides: dotlist overrides of the run's config (not saved).
        address: Ray cluster to simulate the truths on. ray: ``True`` simulates them on Ray,
            ``False`` here, ``None`` decides as ``kestrel sample`` does.
        image: draw ``calibration.png`` (skipped, with ``image=None``, without matplotlib).
        trust: the user trusts the run (``--trust``): its config may name any target;
            without it only Kestrel's config classes and the run's code folders
            (:mod:`kestrel.rundir._trust`).

    Returns:
        A :class:`CalibrationResult`.

    Raises:
        ConfigError: not a run directory; bad ``n``, ``samples`` or ``source``; fewer than 2
            simulations with finite observations. EstimatorError: no saved weights, or an
            estimator without ``log_prob``. Node failures as in sampling.
    """
    start = time.monotonic()
    n, samples = _counts(n, samples, source)
    run, config = _open(run_dir, overrides, "posterior")
    _require_weights(run, config, "calibration")
    note = _prior_note(config) if source == "prior" else None
    if note:
        warnings.warn(note, stacklevel=2)
    root = seed_sequence(seed)
    seed = int(root.entropy)  # type: ignore[arg-type]  # an int when drawn or given
    truth_seed, post_seed, tarp_seed = (int(s.generate_state(1)[0]) for s in root.spawn(3))
    on_ray = ray if ray is not None else needs_ray(config, "ppd", address) is not None
    skipped = SkipLog()
    truths = _truths(run, config, source, n, truth_seed, bool(on_ray), overrides, address, skipped)
    graph = config.graph
    observed = list(graph.observations)
    finite = np.ones(len(truths[graph.latents[0]]), dtype=bool)
    for name in [*observed, *graph.latents]:
        finite &= np.isfinite(truths[name].reshape(len(finite), -1)).all(axis=1)
    if int(finite.sum()) < 2:
        raise ConfigError(
            f"calibration: {int(finite.sum())} of {n} simulations have finite observations; "
            "need at least 2"
        )
    truths = {k: v[finite] for k, v in truths.items()}
    report = _report(run, config, truths, samples, post_seed, tarp_seed)
    report.update(
        {
            "from": source,
            "seed": seed,
            "dropped": int(len(finite) - finite.sum()),
            "skipped": skipped.errors,
            "density_space": _density_space(config.graph),
            "ray": bool(on_ray),
            "wall_time": round(time.monotonic() - start, 2),
            "warnings": [note] if note else [],
        }
    )
    folder = os.path.join(run.root, CHECKS_DIR)
    path = os.path.join(folder, "calibration.json")
    write_atomic(path, (json.dumps(report, indent=1) + "\n").encode())
    png = _draw(report, os.path.join(folder, "calibration.png")) if image else None
    return CalibrationResult(
        path,
        png,
        report["verdict"],
        float(report["max_deviation"]),
        int(report["n"]),
        samples,
        source,
        seed,
        bool(on_ray),
        round(time.monotonic() - start, 2),
        report,
        skipped,
    )


def _prior_note(config: RunConfig) -> str | None:
    """The warning for ``--from prior`` on estimators trained with proposals (not amortized)."""
    graph = config.graph
    focused = [m for m in graph.latents if trains_with_proposals(graph.nodes[m].estimator)]
    if not focused:
        return None
    names = ", ".join(repr(m) for m in focused)
    return (
        f"calibration --from prior: node{'s' if len(focused) > 1 else ''} {names} trained with "
        "proposals focused on the run's observation (not amortized: true): prior-wide "
        "calibration is not what the estimator was trained for (use --from proposal)"
    )


def _counts(n: int, samples: int, source: str) -> tuple[int, int]:
    if source not in SOURCES:
        raise ConfigError(f"calibration: --from {source!r} is not one of {', '.join(SOURCES)}")
    n = check_count(n, "n")
    samples = check_count(samples, "samples")
    if n < 2:
        raise ConfigError(f"calibration: n={n}; check on at least 2 simulations")
    if samples < 10:
        raise ConfigError(f"calibration: samples={samples}; draw at least 10 per simulation")
    return n, samples


def _truths(
    run: RunDir,
    config: RunConfig,
    source: str,
    n: int,
    seed: int,
    on_ray: bool,
    overrides: Iterable[str],
    address: str | None,
    skipped: SkipLog,
) -> dict[str, np.ndarray]:
    """node → ``(n, *D)`` for the latents and the observed nodes: θ* and x* (without the rows
    whose simulation raised, ``on_error: skip``: counted in ``skipped``)."""
    graph = config.graph
    if source == "prior":
        plan = forward_plan(graph)
    else:
        plan = resimulation_plan(graph, "sample_proposal", graph.latents)
    keys = [flat_key(m, "value") for m in dict.fromkeys([*graph.latents, *graph.observations])]
    trace: RefTrace | LocalTrace
    if on_ray:
        from kestrel.session._session import RunSession

        session = RunSession.for_sample(run.root, overrides=overrides, seed=seed)
        with session.ray(address), session.deployed() as dg:
            if source != "prior":
                session.load_weights(dg, graph.latents)
            trace = dg.run(n, plan)
            arrays = dg.to_arrays(trace, keys)
    else:
        from kestrel.session._local import LocalGraph

        local = LocalGraph(graph, seed, estimators=source != "prior")
        if source != "prior":
            local.load(run.graph, graph.latents)
        trace = local.run(n, plan)
        arrays = local.to_arrays(trace, keys)
    keep = skipped.add(trace)
    rows = slice(None) if keep is None else keep
    return {k.rsplit(".", 1)[0]: np.asarray(v)[rows] for k, v in arrays.items()}


def _report(
    run: RunDir,
    config: RunConfig,
    truths: Mapping[str, np.ndarray],
    samples: int,
    seed: int,
    tarp_seed: int,
) -> dict[str, Any]:
    """Posterior draws and densities for every x*; the calibration figures."""
    from kestrel.session._local import LocalGraph

    graph = config.graph
    latents = list(graph.latents)
    observed = list(graph.observations)
    local = LocalGraph(graph, seed)
    local.load(run.graph, latents)
    rows = {m: truths[m] for m in observed}
    plan = inference_plan(graph, "sample_posterior", observed)
    keys = [flat_key(m, f) for m in latents for f in ("value", "log_prob")]
    draws = run_batch(local, plan, samples, rows, keys)
    m = next(iter(rows.values())).shape[0]
    log_prob_truth = np.zeros(m)
    known = {**rows, **{k: truths[k] for k in latents}}
    for name in latents:
        estimator = local.estimator(name)
        log_prob = getattr(estimator, "log_prob", None)  # optional (not in Estimator)
        if not callable(log_prob):
            raise EstimatorError(
                f"node {name!r}: calibration needs the estimator's log_prob "
                f"({type(estimator).__name__} has none)"
            )
        conds = {c: known[c] for c in graph.nodes[name].evidence}
        theta = truths[name].reshape(m, -1)
        log_prob_truth += _in_normal_space(graph, name, theta, log_prob(theta, conds))
    log_prob_draws = sum(
        _in_normal_space(
            graph,
            k,
            draws[flat_key(k, "value")].reshape(m, samples, -1),
            draws[flat_key(k, "log_prob")],
        )
        for k in latents
    )
    truth = np.concatenate([truths[k].reshape(m, -1) for k in latents], axis=1)
    values = np.concatenate(
        [draws[flat_key(k, "value")].reshape(m, samples, -1) for k in latents], 2
    )
    names = [
        label
        for k in latents
        for label in node_labels(k, truths[k][0].size, list(graph.nodes[k].names) or None)
    ]
    return calibration_report(
        truth,
        values,
        log_prob_truth,
        log_prob_draws,
        names=names,
        references=_prior_draws(graph, m, tarp_seed),
    )


def _prior_draws(graph: Graph, m: int, seed: int) -> np.ndarray:
    """``(m, d)`` draws of the latents from the prior (TARP's reference points): the latents
    and their ancestors simulated forward, nothing else."""
    from kestrel.session._local import LocalGraph

    needed: set[str] = set()
    todo = list(graph.latents)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(graph.nodes[name].parents)
    plan = [(name, "sample") for name in graph.forward_order if name in needed]
    local = LocalGraph(graph, seed, estimators=False)
    arrays = local.to_arrays(local.run(m, plan), [flat_key(k, "value") for k in graph.latents])
    return np.concatenate([np.asarray(a).reshape(m, -1) for a in arrays.values()], axis=1)


def _in_normal_space(
    graph: Graph, name: str, theta: np.ndarray, log_prob: npt.ArrayLike
) -> np.ndarray:
    """A θ-space log density as the density of the prior's standard-normal coordinates (where
    the node's prior has ``to_normal``): ``log q(z) = log q(θ) − log|det ∂z/∂θ|``.

    Highest-density regions are ranked there: for a prior with bounded support the θ-space
    density of a wide posterior peaks at the bounds (the Jacobian), which would rank the
    centre of the posterior as its tail. The coverage of a calibrated posterior is nominal in
    any fixed coordinates; the estimators draw in these.
    """
    prior = build_simulator(graph.nodes[name])
    to_normal = getattr(prior, "to_normal", None)
    log_prob = np.asarray(log_prob, dtype=np.float64)
    if not callable(to_normal):
        return log_prob
    _, logdet = to_normal(theta, with_logdet=True)
    return np.asarray(log_prob - logdet, dtype=np.float64)


def _density_space(graph: Graph) -> str:
    """``normal`` where every latent's prior has ``to_normal`` (see :func:`_in_normal_space`)."""
    normal = all(
        callable(getattr(build_simulator(graph.nodes[k]), "to_normal", None)) for k in graph.latents
    )
    return "normal" if normal else "theta"


def _draw(report: Mapping[str, Any], path: str) -> str | None:
    from kestrel.check._figure import calibration_figure
    from kestrel.plot._plot import MissingExtra

    try:
        return calibration_figure(report, path)
    except MissingExtra:
        return None
