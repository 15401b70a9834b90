"""``RunSession``: one run directory opened by a command, and the Ray and actors it runs on.

``kestrel launch`` and ``kestrel sample`` set a run up the same way:

1. :meth:`RunSession.for_launch` / :meth:`RunSession.for_sample` load the config and check
   everything that can be checked before Ray starts (``load_config(...,
   check_targets=("simulator", "estimator"))`` and :func:`~kestrel.preflight._checks.preflight`);
   a launch on a directory that holds ``config.yml`` resumes it or restarts it, never
   silently: :func:`~kestrel.rundir._intent.launch_plan` decides which config is used;
   :meth:`RunSession.create` prepares the directory and records the launch in ``run.json``
   (under the run's lock, :mod:`kestrel.rundir._lock`, which :func:`~kestrel.launch` takes
   before :meth:`RunSession.for_launch` reads the folder and holds until the launch ends);
2. :meth:`RunSession.ray` starts (or joins) Ray for the command, and shuts it down afterwards
   only if it started it (:func:`~kestrel.session._ray.ray_for_run`);
3. :meth:`RunSession.deployed` deploys the run's graph (a launch's actors' logs and metrics are
   written into the run directory by the driver) and kills every actor when the command ends;
4. :meth:`RunSession.load_weights` / :meth:`RunSession.save_weights` move the estimators' files
   between the actors and ``<graph>/<node>/``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, cast

from kestrel.preflight._capacity import bytes_per_sample, check_capacity, store_capacity
from kestrel.preflight._checks import preflight
from kestrel.preflight._dryrun import expected_keys
from kestrel.preflight._launch_notes import ignored_config_note, rows_changed_note
from kestrel.report._logging import LOGGER_NAME
from kestrel.report._nodelog import NodeLogSink, RunNodeWrapper
from kestrel.rundir._config import observation_digests
from kestrel.rundir._config_backup import config_files, restore
from kestrel.rundir._history import failure_reason
from kestrel.rundir._intent import launch_plan
from kestrel.rundir._lock import RunLock
from kestrel.rundir._rundir import RunDir
from kestrel.session._ray import cluster_nodes, ray_for_run
from kestrel.session._seeds import launch_seed
from kestrel.tracking._tracker import Tracker
from kestrel_core import ConfigError, EstimatorError, RunConfig, seed_sequence
from kestrel_ray import DeployedGraph, NodeWrapper
from kestrel_ray.internal import check_graph_config

__all__ = ["RunSession", "ray_for_run", "cluster_nodes", "LaunchOutcome"]


class LaunchOutcome(Protocol):
    """What :meth:`RunSession.end_launch` reads of a launch's result (the controller's
    :class:`~kestrel.controller._result.RunResult`; named by what is read, so the session
    does not import the controller that uses it)."""

    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def epochs(self) -> Mapping[str, int]: ...


_TARGETS = ("simulator", "estimator")


class RunSession:
    """A run directory, its checked config and seed, and the graph deployed for one command.

    Args:
        run: the run directory.
        config: the run's config (already checked; see :meth:`for_launch`, :meth:`for_sample`).
        seed: the run's seed; ``None`` draws fresh entropy.
        config_from_run: whether the launch continues the run (its config is the run's own).
        mode: ``"new"``, ``"resume"`` or ``"restart"`` (recorded in ``run.json``).
        overrides: the overrides given (recorded in ``run.json``).

    Attributes:
        run: the :class:`RunDir`, following the config's ``paths``.
        config: the :class:`kestrel_core.RunConfig`.
        seed: the seed (the entropy drawn when none was given).
        config_from_run, mode, overrides: see above.
        archived: where a restart moved the old contents (after :meth:`create`).
        launch_number: this launch's entry in ``run.json`` (after :meth:`create`).
        placement: node → the Ray node id of each of its actors (after :meth:`deployed` with
            ``node_logs=True``).
        sample_bytes: node → bytes one sample takes in the object store, measured by the dry
            run of :meth:`for_launch` (empty otherwise); :meth:`deployed` checks that the
            buffer fits (:mod:`~kestrel.preflight._capacity`).
        expected: flat key → the per-sample shape the dry run (or the node's observation)
            fixed (:func:`kestrel.preflight._dryrun.expected_keys`; empty without a dry run);
            :meth:`deployed` gives it to the store, which checks every append and the
            restored buffer against it.
    """

    def __init__(
        self,
        run: RunDir,
        config: RunConfig,
        *,
        seed: int | None = None,
        config_from_run: bool = False,
        mode: str = "new",
        overrides: Sequence[str] = (),
    ):
        self.run = RunDir(run.root, config)
        self.config = config
        self.seed = int(cast(int, seed_sequence(seed).entropy))  # an int when drawn or given
        self.config_from_run = config_from_run
        self.mode = mode
        self.overrides = list(overrides)
        self.placement: dict[str, list[str]] = {}
        self.sample_bytes: dict[str, int] = {}
        self.expected: dict[str, Any] = {}
        self.archived: str | None = None
        self.launch_number: int | None = None
        self.notes: list[str] = []  # warnings of the launch, logged and kept in run.json
        self._kept: dict[str, bytes | None] | None = None  # see create(), keep_config()

    @classmethod
    def for_launch(
        cls,
        config: Any,
        run_dir: str | os.PathLike[str],
        *,
        overrides: Iterable[str] = (),
        seed: int | None = None,
        mode: str = "auto",
    ) -> RunSession:
        """The session of ``launch``: which config a launch uses (see :func:`launch_plan`).

        Args:
            config: a YAML path, a mapping, an OmegaConf config or a RunConfig (never modified);
                ``None`` on an existing run: resume it.
            run_dir: the run directory (not created here: see :meth:`create`).
            overrides: dotlist overrides. seed: the run's seed.
            mode: ``"auto"``, ``"resume"`` or ``"restart"`` (see :func:`launch_plan`).

        Raises:
            ConfigError, GraphError: no config; an invalid one; a config that differs from the
                run's own in ``"auto"`` mode (naming the keys); no ``buffer`` section; no
                estimator in the graph; an estimator or ``ray.init`` argument that cannot work.
        """
        run = RunDir(run_dir)
        overrides = [overrides] if isinstance(overrides, str) else list(overrides)
        cfg, how = launch_plan(config, run, overrides, mode)
        if cfg.buffer is None:
            raise ConfigError(
                "buffer: kestrel launch needs a buffer section (min_samples, max_samples, "
                "validation_samples)"
            )
        if not cfg.graph.latents:
            raise ConfigError(
                "graph: no node has an estimator; kestrel launch trains estimators (use "
                "`kestrel simulate` for forward simulation only)"
            )
        check_graph_config(cfg.graph)  # what deploying would refuse, before anything is written
        notes = []
        if how == "resume":
            if mode == "resume":
                notes.append(ignored_config_note(config, run, cfg, overrides))
            notes.append(rows_changed_note(run, cfg))
        outputs: dict[str, dict[str, Any]] = {}
        # every simulator on two prior draws, before Ray starts
        preflight(cfg, dry_run=True, outputs=outputs)
        session = cls(
            run, cfg, seed=seed, config_from_run=how == "resume", mode=how, overrides=overrides
        )
        session.notes = [note for note in notes if note]
        session.sample_bytes = bytes_per_sample(outputs)
        session.expected = expected_keys(cfg.graph, outputs)
        return session

    @classmethod
    def for_sample(
        cls,
        run_dir: str | os.PathLike[str],
        *,
        overrides: Iterable[str] = (),
        seed: int | None = None,
    ) -> RunSession:
        """The session of ``sample``: a run directory written by a launch, with its config.

        Args:
            run_dir: the run directory. overrides: dotlist overrides (not saved). seed: the
                draws' seed.

        Raises:
            ConfigError: not a run directory (no ``config.yml``), or its config is invalid.
        """
        run = RunDir(run_dir)
        if not run.has_config():
            raise ConfigError(
                f"{run.root}: not a run directory (no {os.path.basename(run.config_file)}); "
                f"start a run with `kestrel launch -c CONFIG -o {run.root}`"
            )
        cfg = run.load_config(overrides, check_targets=_TARGETS)
        preflight(cfg)
        return cls(run, cfg, seed=seed, config_from_run=True, mode="resume")

    # -- the run directory ---------------------------------------------------------------------
    def create(self, lock: RunLock | None = None) -> None:
        """Prepare the run directory for a launch and record the launch in ``RUN/run.json``.

        ``lock``: the run's lock (:class:`~kestrel.rundir._lock.RunLock`) the launch holds —
        :func:`~kestrel.launch` takes it before :meth:`for_launch` and holds it until the
        launch ends, so this is the first write into the folder under it; ``None`` (tests of
        the directory alone) writes without one.

        A restart first moves the old contents to ``RUN/previous/N/``. Then the folders are
        created, the observations copied into ``RUN/observations/`` and ``RUN/config.yml``
        written (relocatable; unchanged text is not rewritten).

        A resume keeps the bytes of the ``config.yml`` and ``observations/`` they replace
        until :meth:`keep_config` (the run's buffer restored under the new config): a launch
        that fails before then puts them back (:meth:`end_launch`), so that a refused resume
        leaves the run as it was.

        Raises:
            OSError: a file cannot be moved or written.
            RuntimeError: ``lock`` is not held, or is another folder's (nothing is written).
        """
        if lock is not None and not (lock.holds() and lock.root == self.run.root):
            raise RuntimeError(
                f"launch: the lock {lock.path} does not cover the run {self.run.root} (not held "
                "or another folder's); nothing was written"
            )
        if self.mode == "restart" and os.path.isdir(self.run.root):
            self.archived = self.run.archive()
        self.run.makedirs()
        self._kept = config_files(self.run) if self.mode == "resume" else None
        digest = self.run.write_config(self.config)
        first = self.run.history.first_seed() if self.mode == "resume" else None
        if first is not None:  # a resumed run keeps its first seed (each launch: its own stream)
            self.seed = first
        self.launch_number = self.run.history.begin(
            mode=self.mode,
            seed=self.seed,
            config_sha256=digest,
            observations=observation_digests(self.config),
            overrides=self.overrides,
            **({"notes": self.notes} if self.notes else {}),
        )

    def keep_config(self) -> None:
        """The launch now depends on the config :meth:`create` wrote (the run's buffer was
        restored under it): a failure from here on keeps it."""
        self._kept = None

    def restore_config(self) -> list[str]:
        """Put back the ``config.yml`` and ``observations/`` files :meth:`create` replaced (a
        resume that failed before :meth:`keep_config`); see :func:`._config_backup.restore`."""
        kept, self._kept = self._kept, None
        return [] if kept is None else restore(kept, config_files(self.run))

    def end_launch(
        self,
        result: LaunchOutcome | None,
        interrupted: bool = False,
        error: BaseException | None = None,
    ) -> None:
        """Record how the launch ended in ``RUN/run.json`` (``result``: its :class:`RunResult`,
        or ``None`` when it ended before one existed: ``interrupted`` by Ctrl-C, e.g. while
        Ray started, else failed; ``error``: the exception it ended with, the reason of a
        failure that has none).

        A resume that failed before its buffer was restored (:meth:`keep_config`) gets its
        previous ``config.yml`` and observations back (:meth:`restore_config`)."""
        if self.launch_number is None:
            return
        status = getattr(result, "status", None)
        if status in (None, "running"):
            status = "interrupted" if interrupted else "failed"
        if str(status) == "failed":
            try:
                restored = self.restore_config()
            except OSError as err:
                logging.getLogger(LOGGER_NAME).warning(
                    "run %s: the previous config.yml could not be put back: %s", self.run.root, err
                )
            else:
                if restored:
                    logging.getLogger(LOGGER_NAME).warning(
                        "run %s: config.yml and observations/ put back as they were before this "
                        "launch",
                        self.run.root,
                    )
        reason = getattr(result, "reason", None)
        if reason is None and interrupted and result is None:
            reason = "Ctrl-C before training started"
        if reason is None and str(status) == "failed":
            reason = failure_reason(error)
        self.run.history.end(
            self.launch_number,
            status=str(status),
            reason=reason,
            epochs=dict(getattr(result, "epochs", None) or {}),
        )

    def saved_nodes(self) -> list[str]:
        """The estimator nodes whose weights a launch saved in this run."""
        return [m for m in self.config.graph.latents if self.run.has_weights(m)]

    def require_weights(self, purpose: str) -> None:
        """Raise unless every estimator of the run has saved weights.

        Raises:
            EstimatorError: names the node and the folder without weights.
        """
        missing = [m for m in self.config.graph.latents if not self.run.has_weights(m)]
        if missing:
            raise EstimatorError(
                f"node {missing[0]!r}: no saved weights in {self.run.node_dir(missing[0])}; "
                f"{purpose} needs a trained estimator (run `kestrel launch -o {self.run.root}`)"
            )

    # -- Ray and the actors --------------------------------------------------------------------
    def ray(
        self, address: str | None = None, log: logging.Logger | None = None, *, capture=False
    ) -> contextlib.AbstractContextManager[bool]:
        """Ray for the command (see :func:`ray_for_run`, with the config's ``ray`` section);
        ``capture``: the actors' output goes to their ``output.log``, not to this terminal."""
        return ray_for_run(
            address,
            self.config.ray,
            log,
            imports=self.config.paths.imports,
            run_dir=self.run.root,
            log_to_driver=not capture,
        )

    @contextlib.contextmanager
    def deployed(
        self, *, buffer: bool = False, node_logs: bool = False, tracker: Tracker | None = None
    ) -> Iterator[DeployedGraph]:
        """The run's graph deployed on the running Ray; every actor is killed on exit.

        Args:
            buffer: give the store the config's buffer rules (a launch); ``False`` keeps every
                sample.
            node_logs: deploy :class:`RunNodeWrapper` actors whose logs and metrics the driver
                writes to ``<graph>/<node>/output.log`` and ``metrics.csv``
                (:class:`NodeLogSink`), and record :attr:`placement`.
            tracker: (``node_logs``) gets every ``metrics.csv`` row as well
                (:class:`kestrel.tracking.Tracker`).

        With ``buffer``, the store gets :attr:`expected`: a block whose per-sample shape
        differs from it is refused before anything of it is stored.

        Raises:
            ConfigError: (``buffer``) the buffer cannot fit in Ray's object store (the message
                names the sizes), checked before any actor starts.
            As :meth:`DeployedGraph.deploy`.
        """
        if buffer and self.config.buffer is not None and self.sample_bytes:
            check_capacity(
                self.config.buffer,
                self.sample_bytes,
                store_capacity(),
                unchecked=[m for m in self.config.graph.nodes if m not in self.sample_bytes],
                log=logging.getLogger(LOGGER_NAME),
            )
        dg = DeployedGraph(
            self.config.graph,
            seed=launch_seed(self.seed, self.launch_number),
            run_dir=self.run.root,
            buffer=self.config.buffer if buffer else None,
            wrapper_cls=RunNodeWrapper if node_logs else NodeWrapper,
        )
        sink: NodeLogSink | None = None
        try:
            dg.deploy()
            if buffer and self.expected:  # one key schema per run, checked at every append
                dg.store.expect(self.expected)
            if node_logs:
                infos = dg.open_logs()
                self.placement = {
                    name: [info["node_id"] for info in node] for name, node in infos.items()
                }
                sink = NodeLogSink(
                    dg.node_actors(),
                    self.run.node_dir,
                    list(self.config.graph.latents),
                    tracker=tracker,
                ).start()
            yield dg
        finally:
            try:
                if sink is not None:
                    sink.stop()
            finally:
                dg.shutdown()

    def load_weights(self, dg: DeployedGraph, nodes: Iterable[str]) -> list[str]:
        """Load the estimators of ``nodes`` from ``<graph>/<node>/``; returns the nodes.

        Raises:
            KestrelError: an estimator failed to load (naming the node and the folder).
        """
        nodes = list(nodes)
        if nodes:
            dg.load(self.run.graph, nodes)
        return nodes

    def save_weights(self, dg: DeployedGraph, epochs: Mapping[str, int]) -> dict[str, str]:
        """Save the estimators of ``epochs``' nodes to ``<graph>/<node>/`` and mark them saved.

        Args:
            dg: the deployed graph.
            epochs: node → its polled epoch (``saved.json`` gets the saved weights' own).

        Returns:
            node → its folder.

        Raises:
            KestrelError: an estimator failed to save (naming the node and the folder).
        """
        if not epochs:
            return {}
        folders = dg.estimator_files("save", self.run.graph, list(epochs))
        for node, polled in epochs.items():  # the weights' own epoch: the poll may lag
            epoch = dg.saved_epochs.get(node)
            self.run.mark_saved(
                node, {"epoch": int(polled if epoch is None else epoch), "seed": self.seed}
            )
        return folders
