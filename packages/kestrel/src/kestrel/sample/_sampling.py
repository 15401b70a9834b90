"""Drawing samples of a run: ``kestrel sample prior|posterior|proposal|ppd``.

Which nodes a mode writes (one array per node, shape ``(n, *D)``, under the node's name):

=========  ==========================================  ======================================
mode       how                                         nodes written by default
=========  ==========================================  ======================================
prior      forward simulation of the whole graph       every node
posterior  the estimators at the observations          the estimator nodes
proposal   the estimators' tempered proposals          the estimator nodes
ppd        posterior draws, the rest simulated from    every node (the observables re-simulated)
           them
=========  ==========================================  ======================================

``sample.<mode>.exclude_keys`` removes nodes from that list, ``add_keys`` adds nodes the call
produced (for example a deterministic intermediate).

Where the files go (:mod:`kestrel.rundir._samplefiles`): ``RUN/samples/prior/NNNNNN.npz``, and for
the modes that depend on the observation ``RUN/samples/<mode>/<digest>/NNNNNN.npz`` with the
observation beside them (``observation.npz``); ``<digest>`` names the observations the draws are
conditioned on (the run's own by default, ``--observation`` or a ``graph.<node>.observed``
override otherwise), so draws for different observations are never pooled.

Where the draws are made (:func:`needs_ray`): in this process (:class:`~._local.LocalGraph`:
no Ray started, the estimators loaded from ``<graph>/<node>/estimator.pt``) unless a cluster is
named (``--address``, ``ray.address``), ``--ray`` asks for it, or a node that the mode simulates
has ``num_actors > 1`` (its simulator is meant to run in parallel on Ray).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kestrel.rundir._folder import check_run_folder
from kestrel.rundir._lock import read_holder
from kestrel.rundir._rundir import RunDir
from kestrel.rundir._samplefiles import OBSERVED_MODES, observation_digest
from kestrel.rundir._trust import trust_keyword
from kestrel.sample._batch import Batch, draw_batch, read_batch
from kestrel.sample._guards import capture, issue, other_observation, record, trace_findings
from kestrel.sample._observations import GivenObservations, given_observations
from kestrel_core import (
    ConfigError,
    EstimatorError,
    GraphRunner,
    ObservationWarning,
    RunConfig,
    SampleConfig,
    check_count,
    flat_key,
    seed_sequence,
)
from kestrel_core.internal import SkipLog

__all__ = [
    "MODES",
    "SampleResult",
    "Drawn",
    "draw_run",
    "draw_samples",
    "sample_run",
    "select_nodes",
    "shapes_text",
    "needs_ray",
]

MODES = ("prior", "posterior", "proposal", "ppd")
#: rows per graph call when drawing many samples
_CALL_ROWS = 16384


@dataclass(frozen=True)
class SampleResult:
    """What :func:`sample_run` wrote.

    Attributes:
        path: the ``.npz`` file.
        mode: the sample mode.
        n: number of samples.
        seed: the seed used (the entropy when none was given).
        shapes: node → per-sample shape.
        observation: the digest of the observations the draws are conditioned on (the name of
            their folder; ``None`` for prior samples).
        ray: whether the draws were made on Ray.
        batch: ``m`` when the call drew for m observations at once (arrays ``(m, n, *D)``,
            see :mod:`._batch`); ``None`` for one observation.
        skipped: the samples whose simulation raised (``on_error: skip``), dropped from the
            file (fewer than ``n`` rows).
    """

    path: str
    mode: str
    n: int
    seed: int
    shapes: dict[str, tuple[int, ...]]
    observation: str | None = None
    ray: bool = False
    batch: int | None = None
    skipped: SkipLog = field(default_factory=SkipLog)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ConfigError(f"sample mode {mode!r} is not one of {', '.join(MODES)}")


def _default_nodes(dg: GraphRunner, mode: str, produced: Sequence[str]) -> list[str]:
    graph = dg.graph
    if mode in ("posterior", "proposal"):
        return [m for m in produced if m in graph.latents]
    return list(produced)


def select_nodes(
    dg: GraphRunner, mode: str, produced: Sequence[str], entry: SampleConfig | None
) -> list[str]:
    """The nodes a mode writes: the defaults, minus ``exclude_keys``, plus ``add_keys``.

    Raises:
        ConfigError: an ``add_keys``/``exclude_keys`` name is not a node the call produced.
    """
    nodes = _default_nodes(dg, mode, produced)
    for key, names in (
        ("exclude_keys", getattr(entry, "exclude_keys", ())),
        ("add_keys", getattr(entry, "add_keys", ())),
    ):
        for name in names:
            if name not in produced:
                raise ConfigError(
                    f"sample.{mode}.{key}: node {name!r} is not produced by {mode} sampling "
                    f"(produced: {', '.join(produced)})"
                )
    nodes = [m for m in nodes if m not in set(getattr(entry, "exclude_keys", ()))]
    nodes += [m for m in getattr(entry, "add_keys", ()) if m not in nodes]
    return [m for m in produced if m in nodes]


def draw_samples(
    dg: GraphRunner,
    mode: str,
    n: int,
    entry: SampleConfig | None = None,
    observations: Mapping[str, Any] | None = None,
    batch: Batch | None = None,
    skipped: SkipLog | None = None,
    *,
    findings: list[ObservationWarning] | None = None,
) -> dict[str, np.ndarray]:
    """Draw ``n`` samples of ``mode`` from a graph whose weights are loaded.

    Args:
        dg: a :class:`~kestrel_ray.DeployedGraph` or a :class:`~._local.LocalGraph` (a
            :class:`~kestrel_core.GraphRunner`).
        mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
        n: number of samples (≥ 1).
        entry: the config's ``sample.<mode>`` (for ``exclude_keys`` / ``add_keys``) or ``None``.
        observations: node → ``x_o`` (shape ``D``) over the graph's own (not for ``prior``).
        batch: m observations (:class:`~._batch.Batch`): ``n`` samples for each, batched.
        findings: receives what the estimators' observation guards found, returned with the
            draws (the latest call's), that it does not hold yet (for a batch: every call's,
            rows numbered by observation, ``notes`` of :func:`~._batch.run_batch`).
        skipped: the samples whose simulation raised (``on_error: skip``) are counted here and
            dropped (fewer than ``n`` rows); not for a batch (rows stay, NaN-filled).

    Returns:
        node name → array ``(n, *D)`` (the node's values); ``(m, n, *D)`` for a batch.

    Raises:
        ConfigError: unknown mode or node selection. EstimatorError: an estimator cannot sample
            yet (not trained). Node failures as in :meth:`DeployedGraph.run`.
    """
    _check_mode(mode)
    n = check_count(n, "n")
    if batch is not None:
        pick = lambda made: select_nodes(dg, mode, made, entry)  # noqa: E731
        return draw_batch(dg, mode, n, batch, pick, findings)
    observed = {
        "posterior": dg.sample_posterior,
        "proposal": dg.sample_proposal,
        "ppd": dg.sample_ppd,
    }
    parts: dict[str, list[np.ndarray]] = {}
    nodes: list[str] | None = None
    latents = dg.graph.latents
    done = 0
    while done < n:
        rows = min(_CALL_ROWS, n - done)
        trace = dg.sample(rows) if mode == "prior" else observed[mode](rows, observations or None)
        if nodes is None:
            nodes = select_nodes(dg, mode, trace.nodes(), entry)
        arrays = dg.to_arrays(trace, [flat_key(m, "value") for m in nodes])
        keep = skipped.add(trace) if skipped is not None else None  # on_error: skip
        for m in nodes:
            value = arrays[flat_key(m, "value")]
            parts.setdefault(m, []).append(value if keep is None else np.asarray(value)[keep])
        done += rows
    if findings is not None and done:  # what the estimators found at the latest draws
        findings += trace_findings(trace, [m for m in trace.nodes() if m in latents], findings)
    return {m: (v[0] if len(v) == 1 else np.concatenate(v)) for m, v in parts.items()}


def needs_ray(config: RunConfig, mode: str, address: str | None = None) -> str | None:
    """Why a sampling call of ``mode`` runs on Ray; ``None``: one process does it.

    Ray when a cluster is named (``address``, the config's ``ray.address``), or when a node that
    the mode simulates has ``num_actors > 1``: forward simulation (``prior``, ``ppd``, and
    unobserved non-estimator nodes of ``posterior``/``proposal``) of a simulator the config
    runs in parallel. Estimators always fit in one process.
    """
    if address:
        return f"--address {address}"
    if config.ray.get("address"):
        return f"ray.address {config.ray['address']}"
    graph = config.graph
    if mode in ("prior", "ppd"):
        simulated = [m for m in graph.forward_order if mode == "prior" or m not in graph.latents]
    else:
        simulated = [
            m
            for m in graph.inference_order
            if m not in graph.latents and m not in graph.observations
        ]
    multi = [m for m in simulated if graph.nodes[m].num_actors > 1]
    if multi:
        return f"node {multi[0]!r} simulates with num_actors={graph.nodes[multi[0]].num_actors}"
    return None


def _open(
    run_dir: str | os.PathLike[str], overrides: Iterable[str], mode: str
) -> tuple[RunDir, RunConfig]:
    """The run directory and its config (with ``overrides``), without Ray; the estimators'
    ``_target_`` is imported only for the modes that use them (prior needs only the core)."""
    run = RunDir(run_dir)
    check_run_folder(run.root)  # a run a launch wrote, never a model folder's config.yml
    targets = ("simulator",) if mode == "prior" else ("simulator", "estimator")
    config = run.load_config(overrides, check_targets=targets)
    return RunDir(run.root, config), config


def _require_weights(run: RunDir, config: RunConfig, purpose: str) -> None:
    missing = [m for m in config.graph.latents if not run.has_weights(m)]
    if missing:
        holder = read_holder(run.root)  # a launch of the run that has not checkpointed yet
        remedy = (
            f"the run's lock names a launch ({holder.describe()}): while it runs, it saves the "
            "weights at its first checkpoint (every 60 s) and when it stops, so sample then; "
            f"if it was killed, `kestrel launch -o {run.root}` continues the run"
            if holder is not None
            else f"run `kestrel launch -o {run.root}`"
        )
        raise EstimatorError(
            f"node {missing[0]!r}: no saved weights in {run.node_dir(missing[0])}; "
            f"{purpose} needs a trained estimator ({remedy})"
        )


@trust_keyword
def sample_run(
    run_dir: str | os.PathLike[str],
    mode: str,
    *,
    n: int | None = None,
    seed: int | None = None,
    overrides: Iterable[str] = (),
    address: str | None = None,
    observation: GivenObservations = None,
    ray: bool | None = None,
    trust: bool = False,
) -> SampleResult:
    """Load a run, draw samples of ``mode`` and write them into the run.

    Writes ``RUN/samples/prior/NNNNNN.npz``, or ``RUN/samples/<mode>/<digest>/NNNNNN.npz`` with
    ``observation.npz`` beside it (see the module docstring). Everything that can be checked
    before drawing (the run's config, the count, saved weights, the observation) is checked
    first. Draws are made in this process unless :func:`needs_ray` (or ``ray=True``) says Ray.

    Args:
        run_dir: a directory written by :func:`~kestrel.launch`.
        mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
        n: number of samples; ``None`` takes ``sample.<mode>.n`` from the run's config.
        seed: seed of the draws (``None``: fresh entropy, reported in the result).
        overrides: dotlist overrides of the run's config (not saved); a
            ``graph.<node>.observed=…`` override changes the observation like ``observation``.
        address: Ray cluster to join (implies Ray).
        observation: the observation to condition on instead of the run's own (not for
            ``prior``): an array or file spec (``FILE.npy``, ``FILE.npz:key``) for the graph's
            one observed node, or a mapping observed node → array or spec. An array of shape
            ``(m, *D)``, m ≥ 2, is m observations: ``n`` samples for each, in one batched call,
            written as ``(m, n, *D)`` arrays (:mod:`._batch`).
        ray: ``True`` draws on Ray, ``False`` in this process, ``None`` decides
            (:func:`needs_ray`).
        trust: the user trusts the run (``--trust``): its config may name any target;
            without it only Kestrel's config classes and the run's code folders
            (:mod:`kestrel.rundir._trust`).

    Returns:
        A :class:`SampleResult`.

    Raises:
        ConfigError: not a run directory; unknown mode; ``n`` given neither here nor in the
            config; an unusable observation; without ``trust``, a target or ``ray`` setting
            of the run's config that only a trusted run may use (refused before it is
            imported). EstimatorError: no saved weights (modes other than ``prior``).
            ShapeError: an observation of the wrong shape.

    Warns:
        ObservationWarning: the observation is unlike the training data (a feature constant in
            training, far outside it) or, for a run trained with proposals, another than the
            run's own (:mod:`._guards`); the findings are kept beside the sample file
            (``NNNNNN.json``) and in ``<samples>/observation_checks.json`` (a launch copies
            it into ``status.json``); sampling never writes ``status.json``, ``run.json``, the
            buffer or the weights: it may run beside a launch of the run.
    """
    _check_mode(mode)
    run, config = _open(run_dir, overrides, mode)
    if n is None:
        n = config.require_sample(mode).n
    drawn = draw_run(
        run,
        config,
        mode,
        n,
        seed,
        observation,
        overrides=overrides,
        address=address,
        ray=ray,
        what=f"sample.{mode}.n",
    )
    arrays, batch, observed = drawn.arrays, drawn.batch, drawn.observed
    path = run.write_samples(mode, arrays, observations=observed, latest=batch is None)
    if drawn.checked:
        record(run, path, mode, observation_digest(observed or {}), drawn.findings)
    else:
        issue(drawn.findings, stacklevel=2)
    skip = 1 if batch is None else 2  # (n, *D), or (m, n, *D) for a batch
    return SampleResult(
        path,
        mode,
        drawn.n,
        drawn.seed,
        {m: tuple(a.shape[skip:]) for m, a in arrays.items()},
        observation_digest(observed) if observed else None,
        drawn.ray,
        None if batch is None else batch.m,
        drawn.skipped,
    )


@dataclass(frozen=True)
class Drawn:
    """What :func:`draw_run` drew (nothing written).

    Attributes:
        mode: the sample mode. n: samples per observation. seed: the seed used (the entropy
        when none was given). arrays: node → ``(n, *D)``, or ``(m, n, *D)`` for a batch.
        observed: every observed node → the observation the draws are conditioned on
        (``(m, *D)`` for the batched nodes; ``None`` for ``prior``). batch: the
        :class:`~._batch.Batch` of m observations, or ``None``. checked: whether the
        observation was checked (:mod:`._guards`); then ``findings`` belong with the sample
        file (:func:`~._guards.record`), else they are only issued. findings: the
        warnings found (:class:`~kestrel_core.ObservationWarning`, not yet issued). ray: whether the
        draws were made on Ray. skipped: the samples whose simulation raised
        (``on_error: skip``).
    """

    mode: str
    n: int
    seed: int
    arrays: dict[str, np.ndarray]
    observed: dict[str, Any] | None
    batch: Batch | None
    checked: bool
    findings: list[ObservationWarning]
    ray: bool
    skipped: SkipLog


def draw_run(
    run: RunDir,
    config: RunConfig,
    mode: str,
    n: int | None,
    seed: int | None = None,
    observation: GivenObservations = None,
    *,
    overrides: Iterable[str] = (),
    address: str | None = None,
    ray: bool | None = None,
    what: str = "n",
) -> Drawn:
    """Check a sampling call and draw it, writing nothing: :func:`sample_run` without the file
    (and what :class:`kestrel.Run` draws with, ``ray=False``).

    Args:
        run, config: the run and its config as :func:`_open` loads them (with ``overrides``).
        mode, seed, observation, address, ray: as :func:`sample_run`. n: number of samples
            (≥ 1). overrides: the call's config overrides (for the observation check).
        what: the name of ``n`` in messages.

    Raises:
        As :func:`sample_run` (everything checked before drawing).
    """
    _check_mode(mode)
    n = check_count(n, what)
    if n == 0:
        raise ConfigError(f"{what}: expected a positive number of samples, got 0")
    batch = read_batch(config, mode, observation)  # (m, *D) arrays: m observations at once
    given = given_observations(config.graph, mode, None if batch else observation)
    if mode != "prior":
        _require_weights(run, config, f"{mode} sampling")
    observed = {**config.graph.observations, **given} if mode in OBSERVED_MODES else None
    if batch is not None:
        observed = batch.observations(config.graph.observations)
    on_ray = ray if ray is not None else needs_ray(config, mode, address) is not None
    checked = bool(observed) and mode in OBSERVED_MODES
    rows = batch.each(config.graph.observations) if batch else None  # each observation's
    found = other_observation(run, config, observed or {}, bool(overrides), rows) if checked else []
    skipped = SkipLog()
    with capture() as caught:  # the estimators' ObservationWarnings (in this process)
        if on_ray:
            seed, arrays = _draw_on_ray(
                run.root,
                mode,
                n,
                seed,
                overrides,
                address,
                given,
                batch,
                findings=caught,
                skipped=skipped,
            )
        else:
            seed, arrays = _draw_here(
                run, config, mode, n, seed, given, batch, skipped, findings=caught
            )
    return Drawn(
        mode, n, seed, arrays, observed, batch, checked, found + caught, bool(on_ray), skipped
    )


def _draw_here(
    run: RunDir,
    config: RunConfig,
    mode: str,
    n: int,
    seed: int | None,
    observations: Mapping[str, np.ndarray],
    batch: Batch | None = None,
    skipped: SkipLog | None = None,
    *,
    findings: list[ObservationWarning] | None = None,
) -> tuple[int, dict[str, np.ndarray]]:
    from kestrel.session._local import LocalGraph

    seed = int(seed_sequence(seed).entropy)  # type: ignore[arg-type]  # an int when drawn or given
    graph = LocalGraph(config.graph, seed, estimators=mode != "prior")
    if mode != "prior":
        graph.load(run.graph, config.graph.latents)
    entry = config.sample[mode]
    return seed, draw_samples(
        graph, mode, n, entry, observations, batch, skipped, findings=findings
    )


def _draw_on_ray(
    run_dir: str,
    mode: str,
    n: int,
    seed: int | None,
    overrides: Iterable[str],
    address: str | None,
    observations: Mapping[str, np.ndarray],
    batch: Batch | None = None,
    *,
    findings: list[ObservationWarning] | None = None,
    skipped: SkipLog | None = None,
) -> tuple[int, dict[str, np.ndarray]]:
    from kestrel.session._session import RunSession

    session = RunSession.for_sample(run_dir, overrides=overrides, seed=seed)
    config = session.config
    with session.ray(address), session.deployed() as dg:
        if mode != "prior":
            session.load_weights(dg, config.graph.latents)
        entry = config.sample[mode]
        arrays = draw_samples(dg, mode, n, entry, observations, batch, skipped, findings=findings)
    return session.seed, arrays


def shapes_text(arrays: Mapping[str, np.ndarray]) -> str:
    """``"theta (10,), x (1000,)"``."""
    return ", ".join(f"{m} {tuple(a.shape[1:])}" for m, a in arrays.items())
