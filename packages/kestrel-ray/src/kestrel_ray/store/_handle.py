"""``StoreHandle``: the one way to start the store actor and the only caller of its methods.

Like :class:`~kestrel_ray.NodeHandle` for a node actor, a :class:`StoreHandle` wraps the
:class:`~kestrel_ray.SampleStore` actor in typed methods:

* blocking methods that are exactly the :class:`kestrel_core.SampleStore` protocol (``append``,
  ``checkout``, ``release``, ``discard``, ``status``, ``stats``), so the store contract suite
  runs on the handle as is; the store's own errors come back unwrapped from Ray's task error,
  and the warnings of an append are raised in the caller;
* ``submit_*`` and ``*_nowait`` methods for callers that must not block: the launch loop keeps
  one append in flight, a view releases its checkout without waiting;
* the driver's files, through the :class:`~kestrel_ray.store._files.StoreFiles` it holds: the
  snapshot rows an append names (a launch's journal of appends is its launch loop's, not the
  handle's: the loop reads the blocks it appended through :meth:`StoreHandle.wait`);
* the refs it lends the store (:class:`~kestrel_ray.store._lent.LentRefs`): Ray keeps the
  owner's copy of a block whose last reference was the store's, so every
  :meth:`StoreHandle.submit_append` drops, at most every few seconds, the copies of the blocks
  nothing references any more (without it the soak's driver grew by 8.4 bytes a sample).

A handle is small and picklable: the driver passes it to the node actors that train.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray

from kestrel_core import (
    BlockMeta,
    BufferConfig,
    Checkout,
    ConfigError,
    KestrelError,
    StoreError,
    StoreWarning,
)
from kestrel_core.store import JOURNAL_DIR, Appended, DiskPolicy, Schema
from kestrel_ray.store._actor import SampleStore
from kestrel_ray.store._files import StoreFiles
from kestrel_ray.store._lent import LentRefs

if TYPE_CHECKING:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = ["StoreHandle", "create_store"]


class StoreHandle:
    """A :class:`~kestrel_ray.SampleStore` actor as its callers see it.

    Args:
        actor: the store's actor handle (from :meth:`start`).
        timeout: seconds a blocking call waits before :class:`~kestrel_core.StoreError`
            (``None``: no limit).
        use_futures: wait through ``ObjectRef.future()`` instead of ``ray.get`` (inside an
            async actor: Ray's threads resolve the values, never the actor's event loop).
        snapshot_dir: where this handle writes the snapshots the store has due
            (:meth:`write_snapshots`; ``None``: none).
    """

    def __init__(
        self,
        actor: Any,
        *,
        timeout: float | None = None,
        use_futures: bool = False,
        snapshot_dir: str | None = None,
    ):
        self._actor = actor
        self._timeout = timeout
        self._use_futures = bool(use_futures)
        #: the driver's files (snapshots); shared with the with_options copies
        self._files = StoreFiles(snapshot_dir)
        #: the blocks lent to the store (their owner's copies dropped once unreferenced)
        self._lent = LentRefs()

    def __reduce__(self) -> tuple[Any, ...]:
        # the snapshot folder is the driver's: a handle sent to an actor does not write files
        return (_rebuild, (self._actor, self._timeout, self._use_futures))

    @classmethod
    def start(
        cls, *, wait: bool = True, snapshot_dir: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> StoreHandle:
        """Start a store actor (``num_cpus=0``, on the driver's node).

        Args:
            wait: return only once the actor is constructed.
            snapshot_dir: where this handle (the driver's) writes the snapshots the store has
                due (:meth:`write_snapshots`); required with ``snapshot_every > 0``.
            **kwargs: the :class:`~kestrel_ray.SampleStore` arguments (buffer rules, snapshots,
                seed).

        Raises:
            ConfigError: bad buffer values (checked here, before the actor starts, where the
                error is readable).
        """
        if kwargs.get("snapshot_every") and snapshot_dir is None:
            raise ConfigError(
                f"buffer.snapshot_every={kwargs['snapshot_every']} needs a snapshot directory"
            )
        SampleStore(**kwargs)
        folder = None if snapshot_dir is None else os.fspath(snapshot_dir)
        options: dict[str, Any] = {"num_cpus": 0, "scheduling_strategy": _on_driver_node()}
        handle = cls(
            ray.remote(SampleStore).options(**options).remote(**kwargs), snapshot_dir=folder
        )
        if wait:
            handle.wait(handle._actor.ready.remote())
        return handle

    @classmethod
    def for_buffer(
        cls,
        buffer: BufferConfig | Mapping[str, Any] | None,
        *,
        run_dir: str | os.PathLike[str] | None = None,
        seed: int | None = None,
        wait: bool = True,
    ) -> StoreHandle:
        """Start the store of a run.

        Args:
            buffer: a :class:`kestrel_core.BufferConfig` or mapping (``min_samples``,
                ``max_samples``, ``validation_samples``, ``snapshot_every``, ``journal``,
                ``storage``, ``cache_samples``: a buffer beyond the object store trains from
                ``<run_dir>/buffer/journal``, :class:`~kestrel_core.store.DiskPolicy`); ``None`` keeps
                every sample (no eviction, no validation split).
            run_dir: the run directory; this handle (on the driver) writes the snapshots to
                ``<run_dir>/buffer/snapshots`` after each append (:meth:`write_snapshots`).
            seed: seed of the store's random subsets.
            wait: as :meth:`start`.

        Raises:
            ConfigError: bad buffer values, or snapshots without a run directory.
        """
        kwargs: dict[str, Any] = {}
        snapshot_dir = None
        if buffer is not None:

            def get(name: str, default: Any) -> Any:
                if isinstance(buffer, Mapping):
                    return buffer.get(name, default)
                return getattr(buffer, name, default)

            kwargs = {
                "min_samples": get("min_samples", 0),
                "max_samples": get("max_samples", 2**62),
                "validation_samples": get("validation_samples", 0),
            }
            every = int(get("snapshot_every", 0) or 0)
            if every:
                if run_dir is None:
                    raise ConfigError("buffer.snapshot_every: snapshots need a run directory")
                kwargs["snapshot_every"] = every
                snapshot_dir = os.path.join(os.fspath(run_dir), "buffer", "snapshots")
            disk = _disk_policy(get, run_dir)
            if disk is not None:
                kwargs["disk"] = disk
        if seed is not None:
            kwargs["seed"] = int(seed)
        return cls.start(wait=wait, snapshot_dir=snapshot_dir, **kwargs)

    def __repr__(self) -> str:
        return f"StoreHandle({self._actor!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreHandle) and other._actor == self._actor

    def __hash__(self) -> int:
        return hash(self._actor)

    @property
    def actor(self) -> Any:
        """The actor handle (to kill it; never call its methods directly)."""
        return self._actor

    @property
    def timeout(self) -> float | None:
        """Seconds a blocking call waits (``None``: no limit)."""
        return self._timeout

    @property
    def use_futures(self) -> bool:
        """Whether calls wait through ``ObjectRef.future()``."""
        return self._use_futures

    def with_options(
        self, *, timeout: float | None = None, use_futures: bool | None = None
    ) -> StoreHandle:
        """The same actor, waited on differently (see the constructor)."""
        futures = self._use_futures if use_futures is None else use_futures
        handle = StoreHandle(self._actor, timeout=timeout, use_futures=futures)
        handle._files = self._files  # the same snapshot folder
        handle._lent = self._lent  # and the same blocks lent
        return handle

    def wait(self, refs: ray.ObjectRef | list[ray.ObjectRef]) -> Any:
        """The value of one ref, or the values of a list of refs (one batched wait).

        Raises:
            KestrelError: the one the store raised (unwrapped from Ray's task error).
            StoreError: no answer within the timeout, a stored block is lost, or the store's
                actor is gone.
        """
        single = not isinstance(refs, list)
        batch = refs if isinstance(refs, list) else [refs]
        try:
            if self._use_futures:
                values = [f.result(timeout=self._timeout) for f in [r.future() for r in batch]]
            else:
                values = ray.get(batch, timeout=self._timeout)
        except ray.exceptions.RayTaskError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, KestrelError):
                raise cause from err
            raise
        except (
            ray.exceptions.GetTimeoutError,
            TimeoutError,
            concurrent.futures.TimeoutError,
        ) as err:
            raise StoreError(f"the sample store did not answer within {self._timeout} s") from err
        except ray.exceptions.ObjectLostError as err:
            raise StoreError(f"a stored block is lost: {err}") from err
        except ray.exceptions.RayActorError as err:  # killed, or its machine is gone
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            mine = self._actor._actor_id.hex()
            named = re.findall(r"\b[0-9a-f]{32}\b", str(err))
            dead = getattr(err, "actor_id", None) or (named[0] if named else None)
            if dead is not None and dead != mine and mine not in str(err):
                # a block's maker: Ray could not rebuild a block lost with its node
                raise StoreError(
                    "a stored block cannot be read: its only copy was lost and the actor "
                    f"that simulated it is unavailable (its node lost?) to rebuild it: {first}"
                ) from err
            raise StoreError(f"the sample store's actor is gone: {first}") from err
        return values[0] if single else values

    # -- the driver's files ---------------------------------------------------------------------
    def write_snapshots(self, due: Sequence[tuple[np.ndarray, np.ndarray, Any]]) -> int:
        """Write the snapshots an append returned as due (``Appended.snapshots``); returns how many.

        The driver's side of snapshots: the store names the rows, this handle reads their
        blocks (one batched :meth:`wait`) and writes ``<snapshot_dir>/<id>.npz``. A no-op for a
        handle without snapshot folder (an actor's copy, a store without snapshots).

        Raises:
            OSError: a file cannot be written.
        """
        return self._files.write_snapshots(due, self.wait)

    # -- the SampleStore protocol (blocking) --------------------------------------------------------
    def append(self, block: Mapping[str, Any], meta: BlockMeta) -> np.ndarray:
        """Append one block ``{flat_key: ObjectRef}``; returns its new ids (int64 ``(n,)``).

        Raises:
            StoreError: the block breaks the key schema, or a value is not an ObjectRef.

        Warns:
            StoreWarning: more rows at once than the buffer keeps.
        """
        done = self.appended(self.submit_append([(block, meta)]))
        for note in done.notes:
            warnings.warn(note, StoreWarning, stacklevel=2)
        return done.ids

    def checkout(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Checkout:
        """Pin the blocks of the active ids the caller lacks (``reads[i].block``: ``{key: ObjectRef}``).

        Raises:
            StoreError: an unknown key (the message lists the schema) or unreadable status.
        """
        return self.wait(
            self.submit_checkout(statuses, keys, max_samples=max_samples, held_ids=held_ids)
        )

    def release(self, token: int) -> None:
        """End a checkout (waits for the store).

        Raises:
            StoreError: the token is unknown or already released.
        """
        self.wait(self._actor.release.remote(int(token)))

    def discard(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mark TRAINING ids DISFAVOURED; returns how many moved.

        Raises:
            StoreError: an id was never assigned.
        """
        return self.wait(self._actor.discard.remote(_ids(ids)))

    def status(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """int8 statuses of ``ids``.

        Raises:
            StoreError: an id was never assigned.
        """
        return self.wait(self._actor.status.remote(_ids(ids)))

    def stats(self) -> dict[str, int]:
        """Counts ``validation training disfavoured tombstone deleted total blocks``."""
        return self.wait(self.submit_stats())

    def restore(
        self,
        block: Mapping[str, Any],
        meta: BlockMeta,
        ids: np.ndarray,
        statuses: np.ndarray | None = None,
        *,
        next_id: int = 0,
    ) -> int:
        """Put back rows of an earlier store keeping their ids and statuses (a resume); returns
        how many (see :meth:`kestrel_core.store.BlockStore.restore`; ``block`` holds refs).

        Raises:
            StoreError: the rows do not fit the store; nothing is stored.
        """
        self._lend([block])
        return self.wait(
            self._actor.restore.remote(dict(block), meta, ids, statuses, next_id=int(next_id))
        )

    # -- more (blocking) ----------------------------------------------------------------------------
    def schema(self) -> Schema | None:
        """The key schema ``{flat_key: (D, dtype)}``, or ``None`` before the first append."""
        return self.wait(self._actor.schema.remote())

    def expect(self, expected: Mapping[str, Any]) -> None:
        """Fix keys' per-sample shapes before the first block (flat key →
        :class:`~kestrel_core.store.Expected`); every later append and restore is checked
        against them (see :meth:`kestrel_core.store.BlockStore.expect`).

        Raises:
            StoreError: a block already stored differs from them.
        """
        self.wait(self._actor.expect.remote(dict(expected)))

    def held_refs(self) -> int:
        """Number of ObjectRefs the store holds (blocks × keys)."""
        return self.wait(self._actor.held_refs.remote())

    def open_checkouts(self) -> int:
        """Number of checkouts not yet released."""
        return self.wait(self._actor.open_checkouts.remote())

    # -- without waiting ----------------------------------------------------------------------------
    def submit_append(self, blocks: Sequence[tuple[Mapping[str, Any], BlockMeta]]) -> ray.ObjectRef:
        """Append ``[(block, meta), …]`` in one store call, all or nothing; returns at once.

        Returns:
            The ObjectRef of the store's :class:`~kestrel_core.store.Appended`; pass it to
            :meth:`appended`.
        """
        self._lend([block for block, _ in blocks])
        return self._actor.append_blocks.remote([(dict(block), meta) for block, meta in blocks])

    def _lend(self, blocks: Sequence[Mapping[str, Any]]) -> None:
        """The store is about to borrow the refs of ``blocks``: drop this process's copies
        of the blocks lent earlier that nothing references any more (at most every
        :data:`~kestrel_ray.store._lent.SWEEP_EVERY` seconds), then remember these."""
        self._lent.maybe_sweep()
        self._lent.lend(ref for block in blocks for ref in block.values())

    def appended(self, ref: ray.ObjectRef) -> Appended:
        """Wait for a :meth:`submit_append`.

        Returns:
            ``Appended(ids, kept, notes)``: the int64 ids of every row, how many were valid,
            and warnings the caller should show (more samples at once than the buffer holds).

        Raises:
            StoreError: the blocks break the key schema (nothing of the call was stored).
            OSError: a snapshot file cannot be written.
        """
        done = self.wait(ref)
        self.write_snapshots(done.snapshots)
        return done

    def submit_checkout(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> ray.ObjectRef:
        """:meth:`checkout` without waiting: the ObjectRef of the :class:`~kestrel_core.Checkout`."""
        held = None if held_ids is None else np.asarray(held_ids, dtype=np.int64)
        return self._actor.checkout.remote(
            [int(s) for s in statuses],
            [str(k) for k in keys],
            max_samples=int(max_samples),
            held_ids=held,
        )

    def submit_cpu_seconds(self) -> ray.ObjectRef:
        """The ObjectRef of the store process's CPU seconds (user + system) since the store was
        constructed."""
        return self._actor.cpu_seconds.remote()

    def submit_stats(self) -> ray.ObjectRef:
        """:meth:`stats` without waiting: the ObjectRef of the counts."""
        return self._actor.stats.remote()

    def release_nowait(self, token: int) -> None:
        """End a checkout without waiting (Ray runs it after the calls submitted before it)."""
        self._actor.release.remote(int(token))

    def discard_nowait(self, ids: Sequence[int] | np.ndarray) -> None:
        """Mark TRAINING ids DISFAVOURED without waiting."""
        self._actor.discard.remote(_ids(ids))


def _disk_policy(
    get: Callable[[str, Any], Any], run_dir: str | os.PathLike[str] | None
) -> DiskPolicy | None:
    """The buffer's disk rule (``buffer.storage``, ``buffer.cache_samples``): ``None`` for
    ``memory``, or without a journal or run directory (the launch's preflight refused a
    ``disk`` buffer without them); else the journal folder ``<run_dir>/buffer/journal`` and
    the object store's bytes (the cluster's, ``None`` when Ray does not say)."""
    storage = str(get("storage", "auto") or "auto")
    if storage == "memory" or run_dir is None or not get("journal", True):
        return None
    try:
        store = ray.cluster_resources().get("object_store_memory")
    except Exception:  # Ray not initialised here: unknown, so auto stays in memory
        store = None
    cache = get("cache_samples", None)
    return DiskPolicy(
        storage=storage,
        folder=os.path.join(os.fspath(run_dir), "buffer", JOURNAL_DIR),
        store_bytes=float(store) if store else None,
        cache_samples=None if cache is None else int(cache),
    )


def _on_driver_node() -> NodeAffinitySchedulingStrategy | str:
    """The store's place: the driver's node. The driver owns every stored block (it called
    the simulators) and the run directory, so the store shares its fate and no other machine's
    loss takes the store with it (measured on a ``ray start`` cluster: a store Ray had placed
    on a worker node died with it and stopped the launch). Hard: a soft affinity let Ray put
    the store on a worker node now and then although the driver's node could host it
    (measured on the lost-node test's cluster, Ray 2.60: one store of two on a worker) — the
    store asks for no CPU, so every node with a raylet can host it; ``"DEFAULT"`` where Ray
    cannot say which node the driver is on."""
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    except Exception:  # no node of its own (Ray Client): wherever Ray puts it
        return "DEFAULT"


def _ids(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(ids)
    return arr if arr.dtype.kind not in "iu" else arr.astype(np.int64)


def _rebuild(actor: Any, timeout: float | None, use_futures: bool) -> StoreHandle:
    return StoreHandle(actor, timeout=timeout, use_futures=use_futures)


def create_store(**kwargs: Any) -> StoreHandle:
    """Start a :class:`SampleStore` actor (``num_cpus=0``) and return its :class:`StoreHandle`.

    Same as :meth:`StoreHandle.start`.

    Args:
        **kwargs: passed to :class:`SampleStore`.

    Raises:
        ConfigError: bad buffer values (checked here, before the actor starts).
    """
    return StoreHandle.start(**kwargs)
