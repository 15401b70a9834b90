"""``--reuse OLD``: a new run starts from the simulation banks of earlier runs.

``kestrel launch -c CONFIG -o NEW --reuse OLD [--reuse OLD2]`` (or the config's ``reuse:``
list of run folders, relative to the config file; or ``kestrel.launch(..., reuse=[...])``)
appends the valid rows of each OLD's bank (:mod:`._bank`) as NEW's initial rows, before the
initial simulation: they count as simulations of ``budget.simulations`` (as ``kestrel import``ed
rows do), the initial simulation draws only what ``min_samples + validation_samples`` still
needs beyond them, and resimulation spends only what the budget has left.

**What is checked, before anything is written** (:func:`plan_reuse`, without Ray):

* each OLD is a run folder (``run.json``), its ``config.yml`` reads, it has a bank (a
  ``manifest.jsonl`` in its journal folder: runs launched before the bank, or with
  ``buffer.journal: false``, have none), and each chunk file the manifest lists is there with
  the size it was written with; otherwise one line naming the folder (and the file);
* the rows were simulated as this config simulates: the simulator digest of each chunk
  (:mod:`._digest`: every node's ``simulator`` section and ``parents``, and the simulators'
  code files) equals this config's. An OLD none of whose rows match is refused, naming the
  differing keys (``graph.x.simulator.sigma: 0.1 → 0.2``, ``code of module 'model': …``) and the
  remedy; an OLD with chunks of two digests (a resume that changed a simulator) gives only the
  matching ones (a warning says how many were left out and why);
* the budget: the initial simulation left after the reused rows must fit what the budget has
  left after them (as :meth:`~kestrel.controller._budget.Budget.check_initial`);
* NEW: ``--reuse`` of a folder that already holds rows of its own launches (a snapshot or
  journal files) is refused, as ``kestrel import`` into a launched run is — reused rows enter a
  run only at its first launch (``--restart`` starts it afresh from them); a ``reuse:`` key in
  the config of a run that is resumed is not applied again (its rows are in its own buffer).

**Proposal rows.** A run's buffer mixes the rows of every round's proposal with the prior's,
and its estimators train on that mixture: every row carries ``<node>.log_prob``, the
log-density of the distribution it was drawn from (prior or proposal), which the Gaussian
posterior's importance weights use; the flow's atomic APT loss needs no density at all; the
likelihood estimator is right under any proposal. Reused rows keep every key of their chunk —
``log_prob`` included — so an estimator treats a reused proposal row exactly as a row of one of
its own earlier rounds: they are reused. Two cases take prior rows only:

* an estimator that declares ``proposal_rows = False`` (it trains without a proposal
  correction: :class:`kestrel_torch.FlowMatchingPosterior`) — its own runs hold prior rows only,
  and proposal rows would make it learn the mixture's posterior; the log says so, naming it;
* a proposal chunk whose proposal also drew nodes this config does not estimate (the old
  run's estimator nodes, ``proposal_nodes``): those nodes' values are not prior draws, so the
  rows are not draws of this config's joint; left out, said in the log.

The reused rows are appended through the launch's journal, so NEW's own bank holds them (with
``origin: "reused"`` and their sources): a resume of NEW replays them from NEW's files, and NEW
does not depend on OLD after its first launch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from kestrel.persist._bank import Bank, BankChunk, read_bank
from kestrel.persist._digest import SimulatorDigest, digest_changes, simulator_digest
from kestrel.rundir._config import load_run_config
from kestrel.rundir._folder import is_run_folder
from kestrel.rundir._rundir import RunDir
from kestrel_core import BlockMeta, ConfigError, KestrelError, RunConfig, StoreError
from kestrel_core.internal import BUFFER_FILE, describe_changes
from kestrel_core.store import journal_files

if TYPE_CHECKING:
    from kestrel_ray import DeployedGraph

__all__ = ["ReusePlan", "ReuseSource", "plan_reuse", "reuse_folders", "prior_only_estimators"]

#: rows of earlier runs appended at once (one store append, one chunk of the new bank)
APPEND_ROWS = 65_536


@dataclass
class ReuseSource:
    """The rows one earlier run gives.

    Attributes:
        root: the earlier run. bank: its bank. chunks: the chunks reused (id order).
        left_out: why rows were left out → how many.
    """

    root: str
    bank: Bank
    chunks: list[BankChunk] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Valid rows reused."""
        return sum(c.valid for c in self.chunks)


@dataclass
class ReusePlan:
    """What a launch reuses (:func:`plan_reuse`).

    Attributes:
        sources: one per earlier run, in the order given. digest: the new run's simulator
        digest. notes: warnings to log (rows left out, a ``reuse:`` not applied).
    """

    sources: list[ReuseSource] = field(default_factory=list)
    digest: SimulatorDigest | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Valid rows the launch appends."""
        return sum(s.rows for s in self.sources)

    def append(
        self,
        dg: DeployedGraph,
        append_blocks: Callable[[list[Any], Mapping[str, Any]], int],
        log: logging.Logger,
    ) -> int:
        """Append the reused rows to ``dg``'s store, in the order given and each run's id order;
        returns the rows the store kept.

        Args:
            dg: the deployed graph. append_blocks: ``append_blocks(blocks, origin)`` → rows
                kept (the launch's :meth:`~kestrel.controller._appends.Appends.append_blocks`).
            log: the driver's logger.

        Raises:
            ConfigError: a chunk file cannot be read, or the store refuses the rows (another
                key schema), naming the earlier run and the file.
        """
        kept = 0
        for source in self.sources:
            rows = {True: 0, False: 0}
            for group in _groups(source.chunks):
                parts, origins, appended = [], [], 0
                for chunk in group:
                    try:
                        arrays, valid = source.bank.read(chunk)
                    except StoreError as err:
                        raise ConfigError(
                            f"reuse: {source.root}: its bank is damaged: {err}; restore the "
                            f"file, or launch without --reuse {source.root}"
                        ) from err
                    if not valid.any():
                        continue
                    arrays = {k: np.ascontiguousarray(a[valid]) for k, a in arrays.items()}
                    n = int(valid.sum())
                    appended += n
                    parts.append(
                        ({k: ray.put(a) for k, a in arrays.items()}, BlockMeta.of(arrays, n))
                    )
                    origins.append(
                        {
                            "run": source.root,
                            "file": chunk.file,
                            "origin": chunk.origin,
                            "round": chunk.round,
                            "rows": n,
                        }
                    )
                if not parts:
                    continue
                origin = {
                    "origin": "reused",
                    "round": None,
                    "from_prior": group[0].from_prior,
                    "proposal_nodes": list(group[0].proposal_nodes),
                    "sources": origins,
                }
                try:
                    kept += append_blocks(parts, origin)
                except StoreError as err:
                    raise ConfigError(
                        f"reuse: the rows of {source.root} ({group[0].file} …) do not fit this "
                        f"run's store: {err}; launch without --reuse {source.root}"
                    ) from err
                rows[group[0].from_prior] += appended
            log.info(
                "reuse: %d rows from %s (%d drawn from the prior, %d from proposals)",
                rows[True] + rows[False],
                source.root,
                rows[True],
                rows[False],
            )
        return kept


def reuse_folders(config: RunConfig, extra: Iterable[str | os.PathLike[str]] = ()) -> list[str]:
    """The earlier runs a launch reuses: the config's ``reuse:`` (absolute, as loaded), then
    ``extra`` (``--reuse``; relative to the current folder), each once."""
    given = list((config.to_dict() or {}).get("reuse") or [])
    given += [os.path.abspath(os.path.expanduser(os.fspath(p))) for p in extra]
    out: list[str] = []
    seen: set[str] = set()
    for folder in given:
        real = os.path.realpath(folder)
        if real not in seen:
            seen.add(real)
            out.append(os.path.abspath(folder))
    return out


def prior_only_estimators(config: RunConfig) -> list[str]:
    """The estimator nodes whose estimator declares ``proposal_rows = False`` (it trains
    without a proposal correction), as ``"node (Class)"``."""
    out = []
    for node in config.graph.latents:
        spec = config.graph.nodes[node].estimator
        assert spec is not None  # a latent is a node with an estimator
        try:
            target = spec.resolve()
        except KestrelError:
            continue
        if getattr(target, "proposal_rows", True) is False:
            out.append(f"{node} ({spec.target_name})")
    return out


def holds_rows(run: RunDir) -> bool:
    """Whether the run folder holds rows of its own launches (a snapshot or journal files)."""
    if os.path.exists(os.path.join(run.snapshots, BUFFER_FILE)):
        return True
    return any(f.complete for f in journal_files(run.journal))


def plan_reuse(
    config: RunConfig,
    run: RunDir,
    extra: Sequence[str | os.PathLike[str]] = (),
    *,
    fresh: bool = False,
) -> ReusePlan | None:
    """What a launch of ``run`` with ``config`` reuses (module docstring); ``None``: nothing
    (no ``reuse``). Reads the earlier runs' manifests, no chunk; imports nothing but the
    estimator classes' attribute (their modules are loaded already by the launch's checks).

    Args:
        config: the launch's :class:`kestrel_core.RunConfig`. run: the new run (its paths).
        extra: ``--reuse`` folders (``launch(reuse=...)``), after the config's ``reuse:``.
        fresh: the launch ignores what the folder holds (``--restart``).

    Raises:
        ConfigError: see the module docstring (one line naming the folder, the file, the keys).
    """
    folders = reuse_folders(config, extra)
    if not folders:
        return None
    if not fresh and holds_rows(run):
        if extra:
            parent, name = os.path.split(run.root)
            fresh_run = os.path.join(parent, name + "-reused")
            raise ConfigError(
                f"{run.root} holds rows of its own launches: reused rows enter a run only as "
                "the initial rows of its first launch; reuse into a new folder: `kestrel launch "
                f"-c CONFIG -o {fresh_run} --reuse OLD`, or continue {run.root} without --reuse "
                "(--restart starts it afresh from the reused rows)"
            )
        return ReusePlan(
            notes=[
                f"reuse: not applied: {run.root} continues from its own saved rows (the runs "
                f"of reuse: {', '.join(folders)} entered it at its first launch)"
            ]
        )
    digest = simulator_digest(config, run.root)
    plan = ReusePlan(digest=digest)
    prior_only = prior_only_estimators(config)
    latents = set(config.graph.latents)
    for folder in folders:
        source = _source(folder, run)
        _choose(source, digest, prior_only, latents, plan)
        plan.sources.append(source)
    _check_budget(config, plan.rows)
    return plan


def _source(folder: str, run: RunDir) -> ReuseSource:
    """The earlier run's bank, checked (module docstring).

    Raises:
        ConfigError: not a run, no bank, a damaged bank.
    """
    remedy = f"launch without --reuse {folder}"
    if os.path.realpath(folder) == os.path.realpath(run.root):
        raise ConfigError(f"reuse: {folder} is the run being launched; a run cannot reuse itself")
    if not is_run_folder(folder):
        what = (
            "does not exist" if not os.path.exists(folder) else "is not a Kestrel run (no run.json)"
        )
        raise ConfigError(
            f"reuse: {folder} {what}; give a folder a launch wrote (its -o RUN), or {remedy}"
        )
    try:
        old = RunDir(folder, load_run_config(folder, check_targets=(), trust=True))
        bank = read_bank(old.journal)
    except (KestrelError, OSError) as err:
        raise ConfigError(f"reuse: {folder} is damaged: {err}; {remedy}") from err
    if bank is None or not bank.chunks:
        raise ConfigError(
            f"reuse: {folder} has no simulation bank (no chunk listed in "
            f"{os.path.join(old.journal, 'manifest.jsonl')}): it was launched before Kestrel "
            f"kept every simulation, or with buffer.journal: false; {remedy}"
        )
    damaged = bank.damaged()
    if damaged:
        more = f" (and {len(damaged) - 1} more)" if len(damaged) > 1 else ""
        raise ConfigError(
            f"reuse: {folder}: its bank is damaged: {damaged[0]}{more}; restore the file from a "
            f"copy of the run, or {remedy}"
        )
    return ReuseSource(os.path.abspath(folder), bank)


def _choose(
    source: ReuseSource,
    digest: SimulatorDigest,
    prior_only: list[str],
    latents: set[str],
    plan: ReusePlan,
) -> None:
    """The chunks of ``source`` the new run takes; the others counted in ``left_out``.

    Raises:
        ConfigError: none of its rows was simulated as this config simulates.
    """
    refused: list[Any] = []
    matches: dict[str, bool] = {}
    for chunk in source.bank.chunks:
        if chunk.digest not in matches:
            old = source.bank.digests.get(chunk.digest)
            changes = None if old is None else digest_changes(old, digest)
            matches[chunk.digest] = changes == []
            if changes:
                refused.append(changes)
        if not chunk.valid:
            continue
        if not matches[chunk.digest]:
            _leave_out(source, "simulated with another simulator", chunk.valid)
        elif not chunk.from_prior and prior_only:
            _leave_out(source, f"drawn from proposals ({', '.join(prior_only)})", chunk.valid)
        elif not chunk.from_prior and not set(chunk.proposal_nodes) <= latents:
            nodes = sorted(set(chunk.proposal_nodes) - latents)
            _leave_out(
                source, f"nodes {nodes} drawn by a proposal, not estimated here", chunk.valid
            )
        else:
            source.chunks.append(chunk)
    if not any(matches.values()):
        if refused:
            changes = refused[0]
            keys = "1 key differs" if len(changes) == 1 else f"{len(changes)} keys differ"
            raise ConfigError(
                f"reuse: the rows of {source.root} were simulated with another simulator than "
                f"this config's; {keys} (old → new): {describe_changes(changes)}. Reuse them "
                "with a config whose nodes, simulator sections, parents and simulator code "
                f"equal those of {source.root}/config.yml, or launch without --reuse "
                f"{source.root}"
            )
        raise ConfigError(
            f"reuse: {source.root}: its bank's manifest records no simulator digest for its "
            f"chunks (damaged); launch without --reuse {source.root}"
        )
    for why, rows in source.left_out.items():
        extra = ""
        if why.startswith("drawn from proposals"):
            extra = (
                ": those estimators train without a proposal correction, so only rows drawn "
                "from the prior are reused"
            )
        plan.notes.append(f"reuse: {rows} rows of {source.root} left out, {why}{extra}")


def _leave_out(source: ReuseSource, why: str, rows: int) -> None:
    source.left_out[why] = source.left_out.get(why, 0) + int(rows)


def _check_budget(config: RunConfig, reused: int) -> None:
    """The initial simulation left after ``reused`` rows fits the budget left after them.

    Raises:
        ConfigError: it does not (names the numbers and the keys).
    """
    buffer, total = config.buffer, config.budget.simulations
    if buffer is None or total is None or buffer.initial_samples_path:
        return  # (imported rows: counted when the launch appends them)
    initial = buffer.min_samples + buffer.validation_samples
    need, left = max(0, initial - reused), max(0, int(total) - reused)
    if need > left:
        raise ConfigError(
            f"budget.simulations: {total}, of which the {reused} reused rows leave {left}, is "
            f"smaller than the {need} simulations the initial simulation still needs "
            f"(buffer.min_samples + buffer.validation_samples = {initial}); raise the budget or "
            "lower those buffer sizes"
        )


def _groups(chunks: list[BankChunk]) -> Iterable[list[BankChunk]]:
    """Consecutive chunks of one kind (prior or proposal, the same proposal nodes), at most
    :data:`APPEND_ROWS` rows a group (a chunk larger than that is a group of its own)."""
    group: list[BankChunk] = []
    rows = 0
    for chunk in chunks:
        kind = (chunk.from_prior, chunk.proposal_nodes)
        if group and (
            (group[0].from_prior, group[0].proposal_nodes) != kind
            or rows + chunk.valid > APPEND_ROWS
        ):
            yield group
            group, rows = [], 0
        group.append(chunk)
        rows += chunk.valid
    if group:
        yield group
