"""``NodeWrapper``: the actor that turns condition refs into arrays and outputs into blocks.

One actor per node (per replica). It builds the node's simulator and, for a latent node, its
estimator. A sampling call receives ``n``, condition *descriptors* and the chunk sizes:

* a descriptor is the segment list of a :class:`~kestrel_ray.Column`, nested in a dict so Ray
  hands over the refs unresolved; all refs of a call are resolved with one
  ``await asyncio.gather`` (never a blocking ``ray.get`` on the event loop);
* a condition of one row for ``n > 1`` samples is a broadcast, recognised from the descriptor
  in O(1); it stays ``(1, …)`` up to the final consumer (``call_simulator`` broadcasts it
  read-only; estimators ``.expand()`` it);
* each chunk draws from its own ``numpy.random.Generator`` (seeded by the ``SeedSequence``
  children the driver passes, else spawned from the node's own sequence);
* every output passes the boundary checks of kestrel-core (leading dimension, one per-sample
  shape, numeric arrays converted once) and leaves as one array per field per chunk — as
  *return values* of the call, so the caller owns the objects and killing this actor loses
  none of them. The last return value is a small meta dict.

Simulators run in a worker thread (one call at a time), so the event loop stays free for
``status``; estimator sampling runs on the event loop between training steps, which is how
training and proposal sampling interleave without pausing training. Training, the round
schedule and the estimator's bytes are the actor's :class:`~kestrel_ray.node._training.Training`
component; the actor's methods of the same names delegate to it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
from ray import cloudpickle

from kestrel_core import (
    Estimator,
    EstimatorContext,
    EstimatorError,
    KestrelError,
    ShapeError,
    SimulatorError,
    Spec,
    as_record,
    check_count,
    seed_sequence,
)
from kestrel_core.internal import Attempt, call_estimator, observation_checks, simulate_or_skip
from kestrel_ray.cluster._imports import local_import_paths, local_spec
from kestrel_ray.cluster._resources import actor_options
from kestrel_ray.graph._refs import chunk_grid
from kestrel_ray.node._chunks import (
    BroadcastMemo,
    assemble_conditions,
    condition_refs,
    pack_records,
    rows_of,
    skipped_values,
    spans,
)
from kestrel_ray.node._ensemble import (
    Members,
    check_members,
    ensemble_size,
    member_estimator,
    wait_all,
)
from kestrel_ray.node._training import Training

if TYPE_CHECKING:
    from kestrel_ray.store._handle import StoreHandle

__all__ = ["NodeWrapper", "SAMPLING_METHODS"]

#: the methods that return blocks
SAMPLING_METHODS = ("sample", "sample_posterior", "sample_proposal")
#: seconds :meth:`NodeWrapper.status` waits for an ensemble's members (the driver polls status
#: with a timeout of its own)
MEMBER_STATUS_S = 1.0
#: one-row condition blocks (observations) remembered by ref, most recently used last: a run
#: passes the same observation ref to every call, so it is read once per actor, not per call
BROADCAST_MEMO = 8


class NodeWrapper:
    """Ray actor class (async) for one node.

    Shape symbols: n samples of a call, c rows of a chunk, D the node's per-sample shape.

    Args:
        node_blob: the :class:`kestrel_core.Node`, pickled with ``ray.cloudpickle`` (unpickled
            here, after ``import_paths`` are on ``sys.path``, so a failure is reported by
            :meth:`ready` naming the node instead of killing the actor).
        seed: the node's ``SeedSequence`` (or an int, or ``None`` for fresh entropy).
        import_paths: directories prepended to ``sys.path`` first (the driver's path).
        replica: index of this replica of a multiplexed node.
        member: index of this ensemble member (``ensemble: K`` > 1, see
            :mod:`~kestrel_ray.node._ensemble`): member 0, the node's actor, starts members
            1…K−1 (actors of this class started with ``member=k``).
    """

    def __init__(
        self,
        node_blob: bytes,
        *,
        seed: int | np.random.SeedSequence | None = None,
        import_paths: Sequence[str] = (),
        replica: int = 0,
        member: int = 0,
    ):
        self._name = "<unknown>"
        self._member = int(member)
        #: ensemble members 1…K−1 (member 0 only; ``None``: no ensemble)
        self._members: Members | None = None
        self._spec: Spec | None = None  # this member's estimator spec (a mixture is built from it)
        self._mixture: Estimator | None = (
            None  # the ensemble's mixture, while current (see _posterior)
        )
        self._error: KestrelError | None = None
        self._broadcast = BroadcastMemo(BROADCAST_MEMO)
        self._replica = int(replica)
        self._state = "initializing"
        self._calls = 0
        self._samples = 0
        self._seconds: dict[str, float] = {}  # busy seconds per part (see status)
        self._sim_lock: asyncio.Lock | None = None
        self._estimator: Any = None  # an Estimator, with the optional methods it has
        self._simulator: Any = None
        self._template: tuple[tuple[int, ...], np.dtype] | None = None  # last (D, dtype)
        self._build(node_blob, seed, import_paths)
        #: training, the round schedule and the estimator's bytes
        self._training = Training(self._name, self._estimator)
        if self._error is None and self._spec is not None and self._member == 0:
            self._start_members(ensemble_size(self._spec), seed, import_paths)

    def _build(
        self,
        node_blob: bytes,
        seed: int | np.random.SeedSequence | None,
        import_paths: Sequence[str],
    ) -> None:
        """Load the node and build its simulator (and estimator); a failure is kept in
        ``_error`` for :meth:`ready` to raise, and the state stays ``initializing``."""
        for path in reversed(local_import_paths(list(import_paths))):
            if path not in sys.path:
                sys.path.insert(0, path)
        try:
            self._seq = seed_sequence(seed)
            self.node = cloudpickle.loads(node_blob)
            self._name = self.node.name
        except Exception as err:
            self._error = SimulatorError(
                f"node actor could not load its node: {type(err).__name__}: {err}"
            )
            return
        spec = local_spec(self.node.simulator)
        try:
            self._simulator = spec.build()
        except Exception as err:
            self._error = SimulatorError(
                f"node {self._name!r}: building simulator {spec.target_name} failed: "
                f"{type(err).__name__}: {err}"
            )
            return
        if self.node.estimator is not None:
            spec = local_spec(self.node.estimator)
            context_seed = int(self._seq.generate_state(1)[0])
            try:
                if ensemble_size(spec) > 1:  # each member its own seed and validation rows
                    spec, self._estimator = member_estimator(spec, context_seed, self._member)
                else:  # K = 1: the spec as it is
                    self._estimator = spec.build()
                self._estimator.setup(self._context(context_seed))
                if ensemble_size(spec) > 1:
                    check_members(self._name, self._estimator)
                self._spec = spec
            except Exception as err:
                self._error = EstimatorError(
                    f"node {self._name!r}: building estimator {spec.target_name} failed: "
                    f"{type(err).__name__}: {err}"
                )
                return
        self._state = "idle"

    def _context(self, seed: int) -> EstimatorContext:
        return EstimatorContext(
            node=self._name,
            prior=self._simulator,
            evidence=tuple(self.node.evidence),
            scaffolds=tuple(self.node.scaffolds),
            seed=seed,
        )

    def _start_members(
        self, k: int, seed: int | np.random.SeedSequence | None, import_paths: Sequence[str]
    ) -> None:
        """Start ensemble members 1…k−1 (k > 1), each an actor of this class with the node's
        resource request, spread over the cluster's machines; they die with this actor."""
        if k <= 1:
            return
        options = {"scheduling_strategy": "SPREAD", **actor_options(self.node)}
        cls = ray.remote(NodeWrapper).options(**options)
        blob = cloudpickle.dumps(self.node)
        seq = seed_sequence(seed)
        actors = [
            cls.remote(
                blob,
                seed=np.random.SeedSequence(seq.entropy, spawn_key=seq.spawn_key),
                import_paths=list(import_paths),
                replica=self._replica,
                member=i,
            )
            for i in range(1, k)
        ]
        self._members = Members(self._name, actors)

    # -- lifecycle ---------------------------------------------------------------------------
    async def ready(self) -> dict[str, Any]:
        """Wait-for-construction call; returns what the driver needs to plan calls.

        Returns:
            ``{"node": name, "fields": {method: (field, …)}, "pid": int}``.

        Raises:
            SimulatorError, EstimatorError: building the node failed (names the node and carries
                the original exception text, e.g. an unexpected keyword ``sigmaa``).
        """
        self._check()
        if self._members is not None:
            await self._members.gather("ready")
        return {
            "node": self._name,
            "fields": {m: self._fields(m) for m in SAMPLING_METHODS},
            "pid": os.getpid(),
        }

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def _fields(self, method: str) -> tuple[str, ...]:
        """Fields a method returns: estimators give value and log_prob; a simulator gives value,
        plus log_prob when it has a ``log_prob(value)`` method (priors), as in ``sample_forward``."""
        if method != "sample" and self._estimator is not None:
            return ("value", "log_prob")
        return (
            ("value", "log_prob")
            if callable(getattr(self._simulator, "log_prob", None))
            else ("value",)
        )

    async def status(self) -> dict[str, Any]:
        """``{"node", "replica", "state", "calls", "samples", "seconds", "estimator": {...}}``.

        ``seconds``: wall-clock seconds this actor was busy, per part — ``inputs`` (waiting for
        and reading the conditions' blocks: includes the upstream nodes' work on them),
        ``simulate`` (the simulator's calls, in its worker thread), ``sample_posterior`` and
        ``sample_proposal`` (an estimator's draws). An ensemble's actors add ``member`` (its
        index) and ``node_id`` (the Ray node it runs on); member 0's adds ``ensemble``: one
        ``{"member", "node_id", "estimator"}`` per member (``None`` values for members that
        did not answer within :data:`MEMBER_STATUS_S`).
        """
        out = {
            "node": self._name,
            "replica": self._replica,
            "state": self._state,
            "calls": self._calls,
            "samples": self._samples,
            "seconds": dict(self._seconds),
        }
        if self._estimator is not None:
            out["estimator"] = dict(self._estimator.status())
        if self._spec is not None and ensemble_size(self._spec) > 1:
            out["member"] = self._member
            out["node_id"] = ray.get_runtime_context().get_node_id()
        if self._members is not None:  # a member that does not answer in time: its index only
            try:
                others = await asyncio.wait_for(self._members.gather("status"), MEMBER_STATUS_S)
            except (asyncio.TimeoutError, KestrelError, ray.exceptions.RayError):
                others = [{"member": k} for k in range(1, len(self._members) + 1)]
            keys = ("member", "node_id", "estimator")
            out["ensemble"] = [{k: m.get(k) for k in keys} for m in [out, *others]]
        return out

    # -- rounds (the Training component's) -----------------------------------------------------
    async def configure_rounds(
        self, epochs_per_round: int = 1, deterministic: bool = False, open: bool = False
    ) -> None:
        """A fresh round schedule for the next :meth:`train` (see :class:`kestrel_core.Rounds`).

        Raises:
            ConfigError: ``epochs_per_round`` is not an integer ≥ 1.
        """
        self._training.configure_rounds(epochs_per_round, deterministic, open)
        if self._members is not None:
            await self._members.gather("configure_rounds", epochs_per_round, deterministic, open)

    async def round_ready(self, k: int, marked: bool = False) -> int:
        """Wait until round ``k`` may be drawn; returns the round the next ``sample_proposal``
        draws from (``k``, or a later one when not deterministic). At once without a schedule
        or after training ended. ``marked``: at once, ``k`` if training fixed round ``k``'s
        proposal at one of its epochs, else 0. An ensemble: when every member is ready (marked:
        ``k`` if every member fixed it)."""
        if self._members is None:
            return await self._training.round_ready(k, marked)
        own, others = await wait_all(
            [self._training.round_ready(k, marked), self._members.gather("round_ready", k, marked)]
        )
        return min([own, *others]) if marked else own

    async def round_appended(self, k: int, last: bool = False) -> None:
        """Round ``k``'s rows are in the store (``last``: no round follows)."""
        self._training.round_appended(k, last)
        if self._members is not None:
            self._members.tell("round_appended", k, last)

    async def close_rounds(self, last: int | None = None) -> None:
        """No more rounds come after round ``last`` (budget spent; ``None``: stopping)."""
        self._training.close_rounds(last)
        if self._members is not None:
            self._members.tell("close_rounds", last)

    # -- training (the Training component's) --------------------------------------------------
    async def train(self, store: StoreHandle) -> dict[str, Any]:
        """Train the estimator from the store until it stops; sampling calls interleave.

        Args:
            store: the store's :class:`~kestrel_ray.StoreHandle`; the estimator reads it
                through a :class:`~kestrel_ray.RayBufferView` (futures, no blocking get).

        Returns:
            The final :meth:`status`.

        An ensemble trains every member at once (each in its own actor).

        Raises:
            EstimatorError: the node has no estimator. The estimator's own exceptions pass
                through with a note naming the node (and the member).
        """
        self._check()
        self._training.require_estimator()
        self._state = "training"
        self._mixture = None
        try:
            if self._members is None:
                await self._training.train(store)
            else:
                await wait_all([self._training.train(store), self._members.gather("train", store)])
        except Exception:
            self._state = "failed"
            raise
        self._state = "done"
        return await self.status()

    async def request_stop(self) -> None:
        """Ask the estimator (every member) to stop training after its current step."""
        self._training.request_stop()
        if self._members is not None:
            self._members.tell("request_stop")

    async def save_bytes(self) -> bytes | None:
        """The estimator's state as bytes (``None`` without estimator), for the driver to write.

        No actor method takes a run-directory path: on a cluster the actor's machine has its
        own disk, and the run directory lives with the driver.
        """
        self._check()
        return (await self.save_state())[0]

    async def save_state(self) -> tuple[bytes | None, int | None]:
        """:meth:`save_bytes` and the epoch count those weights reached (the estimator's status
        ``epoch``), read in the same turn of the event loop: no training step falls between.
        ``(None, None)`` without estimator. An ensemble: every member's bytes packed into one
        (the estimator's ``pack_members``) and the fewest epochs any member reached."""
        self._check()
        if self._members is None:
            return self._training.save_state()
        own = self._training.save_state()
        states = [own, *await self._members.gather("save_state")]
        epochs = [e for _, e in states]
        blobs = [b for b, _ in states]
        epoch = None if any(e is None for e in epochs) else min(epochs)
        return self._estimator.pack_members(blobs), epoch

    async def load_bytes(self, data: bytes, source: str = "checkpoint bytes") -> None:
        """Restore the estimator from :meth:`save_bytes`' output; a no-op without estimator.

        Args:
            data: the state. source: its name in error messages (the driver's file).

        Raises:
            EstimatorError: an ensemble's state of another size than the node's ``ensemble``
                (one estimator's state starts every member of an ensemble).
        """
        self._check()
        self._mixture = None
        k = 1 if self._members is None else len(self._members) + 1
        unpack = getattr(self._estimator, "unpack_members", None)
        blobs = unpack(data, source=source) if callable(unpack) else None
        if blobs is None:  # one estimator's weights: every member starts from them
            blobs = [data] * k
        if len(blobs) != k:
            raise EstimatorError(
                f"node {self._name!r}: {source} holds an ensemble of {len(blobs)} members; "
                f"the estimator's ensemble is {k}. Set ensemble: {len(blobs)}, or start "
                "from fresh weights"
            )
        if self._members is None:
            self._training.load_bytes(data, source)
            return
        self._training.load_bytes(blobs[0], f"{source} (member 0)")
        await wait_all(
            [
                a.load_bytes.remote(b, f"{source} (member {i})")
                for i, (a, b) in enumerate(zip(self._members.actors, blobs[1:]), 1)
            ]
        )

    async def member_draw(
        self,
        method: str,
        n: int,
        conditions: Mapping[str, np.ndarray],
        seed: int | np.random.SeedSequence,
    ) -> dict[str, np.ndarray]:
        """``n`` draws of this member's estimator (``sample_proposal``: for the round this
        member's schedule gave), for member 0's mixture draws.

        Returns:
            The record ``{"value": (n, F), "log_prob": (n,)}``.
        """
        self._check()
        self._training.require_estimator()
        out = call_estimator(self._estimator, method, n, conditions, seed, self._training.round)
        return as_record(self._name, method, out, n)

    async def _posterior(self) -> Estimator:
        """The estimator a posterior draw uses: the node's own, or for an ensemble the mixture
        of its members (rebuilt at each call while training runs, then kept)."""
        if self._members is None:
            return self._estimator
        if self._mixture is None or self._state == "training":
            data, _ = await self.save_state()
            assert self._spec is not None  # members are started from the spec
            mixture = self._spec.build()
            mixture.setup(self._context(int(self._seq.generate_state(1)[0])))
            mixture.load_bytes(data, source=f"the ensemble of node {self._name!r}")
            self._mixture = mixture
        return self._mixture

    # -- sampling ----------------------------------------------------------------------------
    async def sample(
        self,
        n: int,
        conditions: Mapping[str, list] | None = None,
        chunks: Sequence[int] | None = None,
        seeds: Sequence[Any] | None = None,
    ) -> tuple:
        """Forward-simulate ``n`` samples from the parents' values.

        Args:
            n: number of samples (int ≥ 1).
            conditions: parent name → segment list ``[(block_ref, start, stop), …]`` of 1
                (broadcast) or ``n`` rows. Under the node's own name: its values, given (samples
                from disk) — checked like a simulator's output and scored by the simulator's
                ``log_prob`` (a prior's), nothing simulated.
            chunks: chunk sizes summing to ``n`` (default: ``sample_chunk_size`` of the node).
            seeds: one ``SeedSequence`` per chunk (default: spawned from the node's sequence).

        Returns:
            ``len(chunks) × len(fields)`` arrays, chunk-major (``(c, *D)`` values, ``(c,)``
            log-probs), then the meta dict of :func:`~kestrel_ray.node._chunks.pack_records` (rows
            whose simulation raised, with ``on_error: skip``, are counted and not ``finite``).

        Raises:
            ShapeError: a condition's row count is neither 1 nor ``n``, or chunks disagree on D.
            SimulatorError: the simulator's output is unusable (wrong leading dimension, ragged
                per-sample shapes, not numeric).
        """
        return await self._call("sample", n, conditions, chunks, seeds)

    async def sample_posterior(
        self,
        n: int,
        conditions: Mapping[str, list] | None = None,
        chunks: Sequence[int] | None = None,
        seeds: Sequence[Any] | None = None,
    ) -> tuple:
        """Draw from the estimator's posterior (or, without one, simulate from the parents).

        Same arguments and return as :meth:`sample`; conditions are the evidence (and scaffold)
        nodes for an estimator. The meta dict of an estimator's draws carries ``findings``
        where its observation guards found something (its status's ``observation_checks``
        after the call's last chunk, :func:`kestrel_core.internal.observation_checks`).
        """
        return await self._call("sample_posterior", n, conditions, chunks, seeds)

    async def sample_proposal(
        self,
        n: int,
        conditions: Mapping[str, list] | None = None,
        chunks: Sequence[int] | None = None,
        seeds: Sequence[Any] | None = None,
    ) -> tuple:
        """Draw from the estimator's proposal (or, without one, simulate from the parents)."""
        return await self._call("sample_proposal", n, conditions, chunks, seeds)

    async def _call(
        self,
        method: str,
        n: Any,
        conditions: Mapping[str, list] | None,
        chunks: Sequence[int] | None,
        seeds: Sequence[Any] | None,
    ) -> Any:
        self._check()
        n = check_count(n)
        if n == 0:
            return {
                "fields": {},
                "nonfinite": 0,
                "finite": [],
            }  # the one return value of an empty call
        chunks = (
            [int(c) for c in chunks]
            if chunks is not None
            else chunk_grid(n, [(self.node.sample_chunk_size, 1)])
        )
        if sum(chunks) != n or any(c <= 0 for c in chunks):
            raise ShapeError(f"node {self._name!r}: chunks {chunks} do not split {n} samples")
        if seeds is None:
            seeds = self._seq.spawn(len(chunks))
        t0 = time.perf_counter()
        arrays = await self._resolve(conditions or {}, n)
        self._busy("inputs", t0)
        found: list[dict[str, Any]] = []  # what an estimator's observation guards found
        if method == "sample" or self._estimator is None:
            if self._sim_lock is None:
                self._sim_lock = asyncio.Lock()
            async with self._sim_lock:
                t0 = time.perf_counter()
                records, raised, error = await asyncio.to_thread(
                    self._simulate, method, arrays, n, chunks, seeds
                )
                self._busy("simulate", t0)
        else:
            records, raised, error = [], None, None
            estimator = self._estimator
            if method == "sample_posterior":
                estimator = await self._posterior()
            for (a, c), seq in zip(spans(chunks), seeds):
                t0 = time.perf_counter()
                conds = {k: rows_of(v, a, c, n) for k, v in arrays.items()}
                # seq: the draws; a proposal draws from the model of the round the driver asked for
                if method == "sample_proposal" and self._members is not None:
                    round = self._training.round
                    out = await self._members.propose(estimator, round, c, conds, seq)
                else:
                    out = call_estimator(estimator, method, c, conds, seq, self._training.round)
                found = observation_checks(estimator)  # read before another call draws
                records.append(as_record(self._name, method, out, c))
                self._busy(method, t0)
                await asyncio.sleep(0)  # let training take a step between chunks
        self._calls += 1
        self._samples += n
        packed = pack_records(self._name, self._fields(method), records, raised, error)
        if found:
            packed[-1]["findings"] = found  # in the meta dict: returned with the draws
        return packed

    def _busy(self, part: str, since: float) -> None:
        """Add the seconds since ``since`` (``time.perf_counter``) to ``part`` (status)."""
        self._seconds[part] = self._seconds.get(part, 0.0) + time.perf_counter() - since

    async def _resolve(self, conditions: Mapping[str, list], n: int) -> dict[str, np.ndarray]:
        """Condition name → read-only array of 1 (broadcast) or ``n`` rows; one batched get."""
        refs = condition_refs(self._name, conditions, n)
        values = await self._broadcast.fetch(refs)
        return assemble_conditions(self._name, conditions, dict(zip(refs, values)))

    def _simulate(
        self,
        method: str,
        arrays: Mapping[str, np.ndarray],
        n: int,
        chunks: Sequence[int],
        seeds: Sequence[Any],
    ) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray], tuple[str, str] | None]:
        """The chunks' records, the rows whose simulation raised (``on_error: skip``) per chunk,
        and the first such exception (see :func:`~kestrel_ray.node._chunks.skipped_values`)."""
        given = arrays.get(self._name)  # the node's own values: checked and scored, not simulated
        missing = [p for p in self.node.parents if p not in arrays and given is None]
        if missing:
            raise SimulatorError(
                f"node {self._name!r}: {method} needs parent {missing[0]!r}, which "
                f"was not passed (got {sorted(arrays)})"
            )
        fields = self._fields(method)
        rngs = [np.random.Generator(np.random.PCG64(seed_sequence(s))) for s in seeds]
        attempts = []
        for (a, c), rng, seq in zip(spans(chunks), rngs, seeds):
            if given is not None:
                value = as_record(
                    self._name, "given values", {"value": given[a : a + c]}, c, fields=("value",)
                )["value"]
                attempts.append(Attempt(value, np.zeros(c, bool)))
            else:
                parents = {p: rows_of(arrays[p], a, c, n) for p in self.node.parents}
                attempts.append(
                    simulate_or_skip(
                        self._name,
                        self._simulator,
                        c,
                        parents,
                        rng=rng,
                        seq=seed_sequence(seq),
                        on_error=self.node.on_error,
                    )
                )
        values, error = skipped_values(self._name, attempts, self._template)
        if values:
            self._template = (values[0].shape[1:], values[0].dtype)
        records = []
        for c, value in zip(chunks, values):
            rec = {"value": value}
            if "log_prob" in fields:
                view = value.view()
                view.flags.writeable = False
                out = {"log_prob": self._simulator.log_prob(view)}
                rec.update(as_record(self._name, "log_prob", out, c, fields=("log_prob",)))
            records.append(rec)
        return records, [t.raised for t in attempts], error
