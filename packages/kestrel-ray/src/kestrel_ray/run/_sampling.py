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
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kestrel_core import ConfigError, check_count, flat_key

from .._deployed import DeployedGraph
from ._session import RunSession

__all__ = ["MODES", "SampleResult", "draw_samples", "sample_run", "select_nodes", "shapes_text"]

MODES = ("prior", "posterior", "proposal", "ppd")
#: rows per DeployedGraph call when drawing many samples
_CALL_ROWS = 16384


@dataclass(frozen=True)
class SampleResult:
    """What :func:`sample_run` wrote.

    Attributes:
        path: the ``.npz`` file. mode: the sample mode. n: number of samples. seed: the seed
        used (the entropy when none was given). shapes: node → per-sample shape.
    """

    path: str
    mode: str
    n: int
    seed: int
    shapes: dict[str, tuple[int, ...]]


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ConfigError(f"sample mode {mode!r} is not one of {', '.join(MODES)}")


def _default_nodes(dg: DeployedGraph, mode: str, produced: Sequence[str]) -> list[str]:
    graph = dg.graph
    if mode in ("posterior", "proposal"):
        return [m for m in produced if m in graph.latents]
    return list(produced)


def select_nodes(dg: DeployedGraph, mode: str, produced: Sequence[str], entry: Any) -> list[str]:
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


def draw_samples(dg: DeployedGraph, mode: str, n: int, entry: Any = None) -> dict[str, np.ndarray]:
    """Draw ``n`` samples of ``mode`` from a deployed graph (weights already loaded).

    Args:
        dg: the deployed graph.
        mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
        n: number of samples (≥ 1).
        entry: the config's ``sample.<mode>`` (for ``exclude_keys`` / ``add_keys``) or ``None``.

    Returns:
        node name → array ``(n, *D)`` (the node's values).

    Raises:
        ConfigError: unknown mode or node selection. EstimatorError: an estimator cannot sample
            yet (not trained). Node failures as in :meth:`DeployedGraph.run`.
    """
    _check_mode(mode)
    n = check_count(n, "n")
    call = {
        "prior": dg.sample,
        "posterior": dg.sample_posterior,
        "proposal": dg.sample_proposal,
        "ppd": dg.sample_ppd,
    }[mode]
    parts: dict[str, list[np.ndarray]] = {}
    nodes: list[str] | None = None
    done = 0
    while done < n:
        rows = min(_CALL_ROWS, n - done)
        trace = call(rows)
        if nodes is None:
            nodes = select_nodes(dg, mode, trace.nodes(), entry)
        arrays = dg.to_arrays(trace, [flat_key(m, "value") for m in nodes])
        for m in nodes:
            parts.setdefault(m, []).append(arrays[flat_key(m, "value")])
        done += rows
    return {m: (v[0] if len(v) == 1 else np.concatenate(v)) for m, v in parts.items()}


def sample_run(
    run_dir: str | os.PathLike[str],
    mode: str,
    *,
    n: int | None = None,
    seed: int | None = None,
    overrides: Iterable[str] = (),
    address: str | None = None,
) -> SampleResult:
    """Load a run, draw samples of ``mode`` and write ``RUN/samples/<mode>/NNNNNN.npz``.

    Everything that can be checked without Ray (the run's config, the count, saved weights)
    is checked first.

    Args:
        run_dir: a directory written by :func:`~kestrel_ray.launch`.
        mode: ``prior``, ``posterior``, ``proposal`` or ``ppd``.
        n: number of samples; ``None`` takes ``sample.<mode>.n`` from the run's config.
        seed: seed of the draws (``None``: fresh entropy, reported in the result).
        overrides: dotlist overrides of the run's config (not saved).
        address: Ray cluster to join (default: ``RAY_ADDRESS`` or a local Ray).

    Returns:
        A :class:`SampleResult`.

    Raises:
        ConfigError: not a run directory; unknown mode; ``n`` given neither here nor in the
            config. EstimatorError: no saved weights (modes other than ``prior``).
    """
    _check_mode(mode)
    session = RunSession.for_sample(run_dir, overrides=overrides, seed=seed)
    config = session.config
    entry = config.sample[mode]
    if n is None:
        n = config.require_sample(mode).n
    n = check_count(n, f"sample.{mode}.n")
    if n == 0:
        raise ConfigError(f"sample.{mode}.n: expected a positive number of samples, got 0")
    if mode != "prior":
        session.require_weights(f"{mode} sampling")
    with session.ray(address), session.deployed() as dg:
        if mode != "prior":
            session.load_weights(dg, config.graph.latents)
        arrays = draw_samples(dg, mode, n, entry)
    path = session.run.write_samples(mode, arrays)
    return SampleResult(
        path, mode, n, session.seed, {m: tuple(a.shape[1:]) for m, a in arrays.items()}
    )


def shapes_text(arrays: Mapping[str, np.ndarray]) -> str:
    """``"theta (10,), x (1000,)"``."""
    return ", ".join(f"{m} {tuple(a.shape[1:])}" for m, a in arrays.items())
