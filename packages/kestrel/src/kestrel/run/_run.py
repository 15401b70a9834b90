"""A trained run as a Python object: :func:`open_run` → :class:`Run` (for notebooks).

``kestrel sample`` writes ``.npz`` files; a notebook wants arrays. ``run = open_run("runs/05")``
gives them::

    run.posterior.sample(1000)            # {"theta": (1000, D)}, at the run's observation
    run.posterior.sample(1000, x=xs)      # {"theta": (m, 1000, D)} for xs of shape (m, *D_x)
    run.posterior.log_prob(theta)         # (n,), -inf outside the prior's support
    run.prior.sample(1000), run.ppd(1000), run.status, run.metrics, run.plot(), run.to_arviz()

Every draw is made **in this process, without Ray** (:class:`~kestrel.session._local.LocalGraph`,
the estimators loaded from ``<graph>/<node>/estimator.pt`` at each call, so a run that is still
training is sampled with its latest weights) through the code path of ``kestrel sample``
(:func:`~kestrel.sample._sampling.draw_run`): the observation ``x`` is checked as
``--observation`` is (the same errors; ``(m, *D)`` is m observations), and a seed gives the same
arrays as ``kestrel sample … --seed S`` (which runs in this process too unless a cluster is
named or a simulated node has ``num_actors > 1``; on Ray the draws agree up to the last bits of
floating-point arithmetic). Unlike ``kestrel sample``, nothing is written into the run folder:
the arrays are returned, and what the observation guards find is issued as
:class:`~kestrel_core.ObservationWarning` only (``sample_run`` keeps it beside its file).

The run's config is loaded once, as ``kestrel sample`` loads it, under the trust model of
:mod:`kestrel.rundir._trust`: ``open_run(RUN)`` refuses targets only a trusted run may name,
``open_run(RUN, trust=True)`` is ``--trust``.

Shape symbols: n draws, m observations, D a node's per-sample shape.
"""

from __future__ import annotations

import csv
import importlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from kestrel.rundir._rundir import RunDir
from kestrel.rundir._trust import trust_keyword, trusted_run
from kestrel.sample._batch import read_batch
from kestrel.sample._guards import issue
from kestrel.sample._observations import GivenObservations, given_observations
from kestrel.sample._sampling import _open, _require_weights, draw_run
from kestrel_core import (
    ConfigError,
    EstimatorError,
    RunConfig,
    ShapeError,
)
from kestrel_core.internal import ESTIMATOR_FILE, build_simulator

if TYPE_CHECKING:  # imported when first used: plotting, calibration and local draws load late
    from matplotlib.figure import Figure

    from kestrel.check._calibrate import CalibrationResult
    from kestrel.rundir._read import RunSamples
    from kestrel.session._local import LocalGraph

__all__ = ["Run", "Posterior", "Prior", "open_run"]

#: latent values: an array ``(n, *D)`` for a graph with one latent node, else latent node → one
Theta: TypeAlias = npt.ArrayLike | Mapping[str, npt.ArrayLike]

#: ``<graph>/<node>/metrics.csv``: one row per epoch (:mod:`kestrel.report._nodelog`)
METRICS_FILE = "metrics.csv"


@trust_keyword
def open_run(run_dir: str | os.PathLike[str], *, trust: bool = False) -> Run:
    """Open a run folder written by :func:`kestrel.launch` (or ``kestrel launch``).

    Args:
        run_dir: the run folder (``~`` expanded).
        trust: the user trusts the run (``--trust``): its config may name any target; without
            it only Kestrel's config classes and the run's code folders
            (:mod:`kestrel.rundir._trust`). Kept for the run's later calls
            (:meth:`Run.check_calibration`).

    Returns:
        A :class:`Run`. Nothing is drawn, built or written yet.

    Raises:
        ConfigError: not a run folder (a model folder, a file, no ``config.yml``: the message
            says what to launch), a damaged ``config.yml``; without ``trust``, a target the
            run's config may name only when trusted (refused before it is imported).
        GraphError: the run's graph is invalid.

    A run without trained weights opens: :attr:`Run.status` and :attr:`Run.metrics` read it,
    :attr:`Run.prior` draws; the posterior and :meth:`Run.ppd` raise
    :class:`~kestrel_core.EstimatorError` (as ``kestrel sample`` does).
    """
    run, config = _open(os.path.expanduser(os.fspath(run_dir)), (), "posterior")
    return Run(run, config, trust=trust)


class Run:
    """A trained run: its posterior, prior, predictive draws, status, metrics and plots.

    Made by :func:`open_run` (or ``kestrel.launch(...).open()``); see the module docstring.

    Attributes:
        path: the run folder (absolute).
        config: its :class:`~kestrel_core.RunConfig`.
        latents: the estimator nodes.
        observed: the observed nodes.
        posterior: a :class:`Posterior`.
        prior: a :class:`Prior`.
        ppd_seed: the seed of the latest :meth:`ppd`.
    """

    def __init__(self, run: RunDir, config: RunConfig, *, trust: bool = False):
        self._run = run
        self.config = config
        self.path = run.root
        self._trust = trust
        self.latents = list(config.graph.latents)
        self.observed = list(config.graph.observations)
        self._dims: dict[str, int | None] = {}
        self.ppd_seed: int | None = None
        self.posterior = Posterior(self)
        self.prior = Prior(self)

    def __repr__(self) -> str:
        return f"Run({self.path!r}, latents={self.latents}, observed={self.observed})"

    # -- drawing -------------------------------------------------------------------------------
    def _draw(
        self, mode: str, n: int, x: GivenObservations, seed: int | None
    ) -> tuple[int, dict[str, Any]]:
        """``kestrel sample``'s checks and draws, in this process, nothing written."""
        with trusted_run(self.path, self._trust):
            drawn = draw_run(self._run, self.config, mode, n, seed, x, ray=False)
        issue(drawn.findings, stacklevel=3)
        return drawn.seed, drawn.arrays

    def ppd(
        self, n: int, x: GivenObservations = None, seed: int | None = None
    ) -> dict[str, np.ndarray]:
        """Posterior predictive draws: latents from the posterior at ``x``, every other node
        simulated from them (``kestrel sample ppd``, nothing written).

        Args:
            n: draws per observation (≥ 1). x: as for :meth:`Posterior.sample`.
            seed: seed of the draws (``None``: fresh entropy, kept in ``run.ppd_seed``).

        Returns:
            node → float array ``(n, *D)`` (``(m, n, *D)`` for m observations), every node
            (``sample.ppd.exclude_keys``/``add_keys`` apply).

        Raises:
            As :meth:`Posterior.sample`.
        """
        self.ppd_seed, arrays = self._draw("ppd", n, x, seed)
        return arrays

    # -- what the launch wrote -----------------------------------------------------------------
    @property
    def status(self) -> dict[str, Any]:
        """``RUN/status.json`` as a dict (read at each access): empty when missing; a damaged
        file (empty, not JSON) gives an empty dict and a
        :class:`~kestrel.rundir._runfiles.RunFileWarning` naming it, as the CLI does."""
        return self._run.read_status()

    @property
    def metrics(self) -> dict[str, Any]:
        """The epochs of each estimator node, from ``<graph>/<node>/metrics.csv`` (read at each
        access; replica 0 of a multiplexed node).

        Returns:
            node → a table of its epochs, one row per epoch: a ``pandas.DataFrame`` when pandas
            is importable, else a dict column → float64 array ``(epochs,)`` (``epoch``,
            ``walltime``, ``train_loss``, ``val_loss``, ``best_val_loss``, ``lr``,
            ``samples_seen``; an empty field is NaN). A node without the file is left out; a
            row cut short (a launch killed while writing) is skipped.
        """
        out: dict[str, Any] = {}
        for node in self.latents:
            path = os.path.join(self._run.node_dir(node), METRICS_FILE)
            if os.path.isfile(path):
                out[node] = _table(_read_metrics(path))
        return out

    # -- delegates -----------------------------------------------------------------------------
    def check_calibration(self, **kwargs: Any) -> CalibrationResult:
        """``kestrel check calibration`` on this run (with this run's ``trust``): writes
        ``RUN/checks/calibration.json`` (and ``.png``) and returns a
        :class:`~kestrel.check._calibrate.CalibrationResult`.

        Args:
            kwargs: as :func:`kestrel.check._calibrate.check_calibration` (``n``, ``samples``,
                ``source``, ``seed``, ``overrides``, ``ray``, ``image``, ``address``).

        Raises:
            As :func:`~kestrel.check._calibrate.check_calibration`.
        """
        from kestrel.check._calibrate import check_calibration

        kwargs.setdefault("trust", self._trust)
        return check_calibration(self.path, **kwargs)

    def _samples(
        self,
        samples: Mapping[str, npt.ArrayLike] | None,
        x: GivenObservations,
        n: int,
        seed: int | None,
    ) -> RunSamples:
        """A :class:`~kestrel.rundir._read.RunSamples` of posterior draws, in memory."""
        from kestrel.rundir._read import RunSamples, _run_observations, run_config

        if samples is None:
            seed, samples = self._draw("posterior", n, x, seed)
            label = f"posterior (in memory, seed {seed})"
        else:
            label = "posterior (in memory)"
        arrays = {str(k): np.asarray(v) for k, v in samples.items()}
        for node, value in arrays.items():
            if node not in self.config.graph.nodes:
                raise ConfigError(
                    f"samples: {node!r} is not a node of the run "
                    f"(nodes: {', '.join(self.config.graph.nodes)})"
                )
            self._check_rows(node, value, "samples")
        observed, truth = _run_observations(run_config(self.path).get("graph") or {}, self.path)
        if x is not None:
            given = given_observations(self.config.graph, "posterior", x)
            observed, truth = {**observed, **given}, {}
        names = {
            node: list(self.config.graph.nodes[node].names)
            for node in arrays
            if self.config.graph.nodes[node].names
        }
        return RunSamples(label, "posterior", arrays, names, self.latents, observed, truth)

    def plot(
        self,
        samples: Mapping[str, npt.ArrayLike] | None = None,
        *,
        x: GivenObservations = None,
        n: int = 2000,
        seed: int | None = None,
    ) -> Figure:
        """The corner plot of posterior draws (``kestrel plot``'s figure), not saved.

        Args:
            samples: node → draws ``(n, *D)`` (e.g. ``run.posterior.sample(...)``); ``None``
                draws ``n`` now. x: the observation they are for (one; ``None``: the run's own,
                whose true values, where its file holds them, are marked).
            seed: seed of the draws when ``samples`` is ``None``.

        Returns:
            A ``matplotlib.figure.Figure`` (shown inline when it ends a notebook cell; closed
            in pyplot, so it is shown once; save it with ``fig.savefig(PATH)``).

        Raises:
            MissingExtra: matplotlib or corner is not installed (``pip install
            'kestrel[plot]'``). ShapeError: ``samples`` that are not ``(n, *D)`` draws of the
            run's nodes. As :meth:`Posterior.sample` when drawing.
        """
        from kestrel.plot._plot import _pyplot, corner_figure

        plt = _pyplot()
        fig = corner_figure(self._samples(samples, x, n, seed))
        plt.close(fig)  # returned, not left open in pyplot: a notebook shows it once
        return fig

    def to_arviz(
        self,
        samples: Mapping[str, npt.ArrayLike] | None = None,
        *,
        x: GivenObservations = None,
        n: int = 2000,
        seed: int | None = None,
    ) -> Any:  # an arviz.InferenceData (arviz is an optional extra)
        """Posterior draws as an ``arviz.InferenceData`` (as ``kestrel export --format arviz``
        builds it, not written): group ``posterior`` (one chain), ``observed_data``.

        Args:
            samples, x, n, seed: as :meth:`plot`.

        Raises:
            MissingExtra: arviz is not installed (``pip install 'kestrel[export]'``).
            ShapeError: as :meth:`plot`. As :meth:`Posterior.sample` when drawing.
        """
        from kestrel.export._export import _arviz, _inference_data

        _arviz()  # the missing extra named before anything is drawn
        return _inference_data(self._samples(samples, x, n, seed))

    # -- shared by Posterior and Prior ---------------------------------------------------------
    def _theta(
        self, theta: Theta, nodes: list[str], what: str
    ) -> tuple[int, dict[str, np.ndarray]]:
        """``theta`` (an array for a one-latent graph, else node → array) as node → float64
        ``(n, *D)``, every node of ``nodes`` given, one ``n``."""
        if not isinstance(theta, Mapping):
            if len(nodes) != 1:
                raise ConfigError(
                    f"{what}: the run has {len(nodes)} latent nodes ({', '.join(nodes)}); "
                    "give theta as a dict node → array (n, *D)"
                )
            theta = {nodes[0]: theta}
        unknown = [k for k in theta if k not in nodes]
        missing = [k for k in nodes if k not in theta]
        if unknown or missing:
            raise ConfigError(
                f"{what}: theta names {', '.join(map(repr, theta)) or 'no node'}; expected "
                f"every latent node: {', '.join(nodes)}"
            )
        out: dict[str, np.ndarray] = {}
        counts = set()
        for node in nodes:
            value = np.asarray(theta[node], dtype=np.float64)
            self._check_rows(node, value, f"{what}: theta")
            counts.add(value.shape[0])
            out[node] = value
        if len(counts) != 1:
            raise ShapeError(f"{what}: the latent nodes hold different numbers of rows: {counts}")
        return counts.pop(), out

    def _dim(self, node: str) -> int | None:
        """The number of components of a latent node's value (its prior's ``full_dim``), or
        ``None`` where the prior does not say."""
        if node not in self._dims:
            dim = None
            if node in self.latents:
                with trusted_run(self.path, self._trust):
                    prior = build_simulator(self.config.graph.nodes[node])
                dim = getattr(prior, "full_dim", None)
            self._dims[node] = int(dim) if isinstance(dim, (int, np.integer)) else None
        return self._dims[node]

    def _check_rows(self, node: str, value: np.ndarray, what: str) -> None:
        """``value`` holds rows ``(n, *D)`` of ``node`` (``prod(D)`` as its prior says)."""
        dim = self._dim(node)
        size = int(np.prod(value.shape[1:])) if value.ndim >= 1 else -1
        if value.ndim < 1 or (dim is not None and (value.ndim < 2 or size != dim)):
            expected = f"(n, {dim})" if dim is not None else "(n, *D)"
            raise ShapeError(
                f"{what}[{node!r}] has shape {value.shape}; expected rows {expected} "
                "(one value: value[None]; m observations: one at a time, value[i])"
            )


class Posterior:
    """The run's posterior: draws and log densities at any observation, in this process.

    Attributes:
        last_seed: the seed of the latest :meth:`sample` (the entropy drawn when none was
            given): pass it back as ``seed`` to draw the same arrays again.
    """

    def __init__(self, run: Run):
        self._owner = run
        self.last_seed: int | None = None
        self._graph: LocalGraph | None = None
        self._stamp: list[tuple[int, int] | None] | None = None

    def __repr__(self) -> str:
        return f"Posterior({self._owner.path!r}, latents={self._owner.latents})"

    def sample(
        self, n: int, x: GivenObservations = None, seed: int | None = None
    ) -> dict[str, np.ndarray]:
        """``n`` posterior draws of the latent nodes given ``x`` (``kestrel sample posterior``,
        nothing written).

        Args:
            n: draws per observation (≥ 1).
            x: ``None`` (the run's own observation), an array or file spec (``FILE.npy``,
                ``FILE.npz:key``) for the graph's one observed node, or a dict observed node →
                array or spec. An array of shape ``(m, *D_x)``, m ≥ 2, is m observations.
            seed: seed of the draws (``None``: fresh entropy, kept in :attr:`last_seed`); the
                same seed gives the same arrays as ``kestrel sample posterior --seed``.

        Returns:
            latent node → float array ``(n, *D)``, or ``(m, n, *D)`` for m observations
            (``sample.posterior.exclude_keys``/``add_keys`` apply).

        Raises:
            ConfigError: bad ``n``; an unreadable observation, a node that is not observed, an
                unnamed observation where several nodes are observed; a NaN or ±inf in ``x``.
            ShapeError: ``x`` of neither ``D_x`` nor ``(m, *D_x)``.
            EstimatorError: the run has no saved weights.

        Warns:
            ObservationWarning: ``x`` is unlike the training data, or another observation than
                the run's own for an estimator trained with proposals (as ``kestrel sample``).
        """
        self.last_seed, arrays = self._owner._draw("posterior", n, x, seed)
        return arrays

    def _local(self) -> LocalGraph:
        """A :class:`~kestrel.session._local.LocalGraph` with the saved weights, built again
        when a weights file changed (a launch still training)."""
        run = self._owner._run
        config = self._owner.config
        _require_weights(run, config, "the posterior's log_prob")
        files = [os.path.join(run.node_dir(m), ESTIMATOR_FILE) for m in config.graph.latents]
        stamp = [_stamp(f) for f in files]
        if self._graph is None or stamp != self._stamp:
            from kestrel.session._local import LocalGraph

            with trusted_run(self._owner.path, self._owner._trust):
                graph = LocalGraph(config.graph, 0)
                graph.load(run.graph, config.graph.latents)
            self._graph, self._stamp = graph, stamp
        return self._graph

    def log_prob(self, theta: Theta, x: GivenObservations = None) -> np.ndarray:
        """The posterior log density at ``theta`` given ``x`` (θ-space; the sum over the
        latent nodes' estimators, each given its evidence).

        Args:
            theta: float array ``(n, *D)`` for a graph with one latent node, else a dict latent
                node → ``(n, *D)`` (every latent node, the same ``n``).
            x: as for :meth:`sample`; ``(m, *D_x)`` is m observations.

        Returns:
            float64 array ``(n,)``, or ``(m, n)`` for m observations (every ``theta`` row at
            each observation); ``-inf`` outside the prior's support.

        Raises:
            ConfigError: theta naming other nodes than the latent ones, or a plain array where
                there are several; an evidence node that is neither observed nor latent (its
                value is unknown); an unusable ``x`` as for :meth:`sample`.
            ShapeError: theta not ``(n, *D)``; ``x`` of the wrong shape.
            EstimatorError: no saved weights, or an estimator without ``log_prob``.
        """
        owner = self._owner
        config = owner.config
        graph = config.graph
        n, values = owner._theta(theta, owner.latents, "posterior.log_prob")
        batch = read_batch(config, "posterior", x)  # as kestrel sample reads --observation
        if batch is not None:
            each = batch.each(graph.observations)
        else:
            each = [{**graph.observations, **given_observations(graph, "posterior", x)}]
        local = self._local()
        out = np.zeros((len(each), n))
        for i, observed in enumerate(each):
            known = {k: np.asarray(v)[None] for k, v in observed.items()}  # one row: broadcast
            known.update(values)
            for node in owner.latents:
                estimator = local.estimator(node)
                log_prob = getattr(estimator, "log_prob", None)  # optional (not in Estimator)
                if not callable(log_prob):
                    raise EstimatorError(
                        f"node {node!r}: the posterior's log_prob needs the estimator's "
                        f"log_prob ({type(estimator).__name__} has none)"
                    )
                evidence = list(graph.nodes[node].evidence)
                unknown = [c for c in evidence if c not in known]
                if unknown:
                    raise ConfigError(
                        f"posterior.log_prob: node {node!r} is conditioned on {unknown[0]!r}, "
                        "which is neither observed nor latent; its density cannot be evaluated"
                    )
                conds = {c: known[c] for c in evidence}
                flat = values[node].reshape(n, -1)
                out[i] += np.asarray(log_prob(flat, conds), dtype=np.float64)
        return out if batch is not None else out[0]


class Prior:
    """The run's prior: forward draws of the whole graph, and the latents' prior density.

    Attributes:
        last_seed: the seed of the latest :meth:`sample`.
    """

    def __init__(self, run: Run):
        self._owner = run
        self.last_seed: int | None = None

    def __repr__(self) -> str:
        return f"Prior({self._owner.path!r})"

    def sample(self, n: int, seed: int | None = None) -> dict[str, np.ndarray]:
        """``n`` forward draws of every node (``kestrel sample prior``, nothing written).

        Returns:
            node → float array ``(n, *D)`` (``sample.prior.exclude_keys``/``add_keys`` apply).

        Raises:
            ConfigError: bad ``n``. Simulator failures as in ``kestrel sample prior``.
        """
        self.last_seed, arrays = self._owner._draw("prior", n, None, seed)
        return arrays

    def log_prob(self, theta: Theta) -> np.ndarray:
        """The prior log density of the latent nodes at ``theta`` (the sum over the nodes).

        Args:
            theta: float array ``(n, *D)`` for one latent node, else a dict latent node →
                ``(n, *D)``.

        Returns:
            float64 array ``(n,)``; ``-inf`` outside the support.

        Raises:
            ConfigError: a latent node with parents (its prior depends on them) or whose
                simulator has no ``log_prob``; theta naming other nodes.
            ShapeError: theta not ``(n, *D)``.
        """
        owner = self._owner
        graph = owner.config.graph
        n, values = owner._theta(theta, owner.latents, "prior.log_prob")
        out = np.zeros(n)
        for node in owner.latents:
            spec = graph.nodes[node]
            if spec.parents:
                raise ConfigError(
                    f"prior.log_prob: node {node!r} has parents ({', '.join(spec.parents)}); "
                    "its prior density depends on them and is not evaluated here"
                )
            with trusted_run(owner.path, owner._trust):
                simulator = build_simulator(spec)
            log_prob = getattr(simulator, "log_prob", None)
            if not callable(log_prob):
                raise ConfigError(
                    f"prior.log_prob: the simulator of node {node!r} "
                    f"({type(simulator).__name__}) has no log_prob"
                )
            out += np.asarray(log_prob(values[node].reshape(n, -1)), dtype=np.float64)
        return out


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # LocalGraph.load names the missing file
    return st.st_mtime_ns, st.st_size


def _read_metrics(path: str) -> dict[str, np.ndarray]:
    """column → float64 array of a ``metrics.csv`` (header row first)."""
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return {}
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    return {
        name: np.array([_number(r[j]) for r in body], dtype=np.float64)
        for j, name in enumerate(header)
    }


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _table(columns: dict[str, np.ndarray]) -> Any:
    """A pandas DataFrame when pandas is importable, else the dict itself."""
    try:
        pandas = importlib.import_module("pandas")  # optional: not a dependency of kestrel
    except ImportError:
        return columns
    return pandas.DataFrame(columns)
