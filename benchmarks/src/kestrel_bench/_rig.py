"""Stores filled with pre-simulated blocks, and a loader driven into exact states for timing.

A :class:`StoreRig` holds N samples in blocks of ``block_rows`` rows, either in a Ray
:class:`~kestrel_ray.SampleStore` actor (blocks ``ray.put`` by the driver, which then owns them,
as it owns a NodeWrapper's return values) or in kestrel-core's :class:`~kestrel_core.InMemoryStore`
(no Ray: the GPU benchmarks). :class:`LoaderRig` puts a real :class:`~kestrel_torch.CachedDataLoader`
on top and brings it into the states the ``apply_fetch`` and ``sync`` groups time;
:func:`empty_cache` and :func:`check_cache` are the tensor cache of the naive baselines and the
check of a loader's cache against the rig's data. :class:`ReplayRounds` is the ``store``
group's round on a deployed graph of replaying simulators.

Shape symbols: N samples, R rows of a block.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._data import DATA_KEYS, N_BINS, N_PARAMS, make_samples

__all__ = [
    "StoreRig",
    "LoaderRig",
    "ReplayRounds",
    "BLOCK_ROWS",
    "split_blocks",
    "empty_cache",
    "check_cache",
]

#: rows per stored block: example 05's ``simulate_count`` (one resimulation round)
BLOCK_ROWS = 128


def split_blocks(
    arrays: Mapping[str, np.ndarray], rows: int = BLOCK_ROWS
) -> list[dict[str, np.ndarray]]:
    """Cut ``{key: (N, *D)}`` into blocks of at most ``rows`` rows (views, in order)."""
    n = len(next(iter(arrays.values())))
    return [{k: v[a : a + rows] for k, v in arrays.items()} for a in range(0, n, rows)]


class StoreRig:
    """A store with ``buffer`` rules and pre-simulated blocks to append.

    Args:
        backend: ``"ray"`` (a :class:`~kestrel_ray.SampleStore` actor; Ray must be running) or
            ``"memory"`` (:class:`~kestrel_core.InMemoryStore`).
        buffer: ``min_samples``, ``max_samples``, ``validation_samples``.
        sets: how many sets of N samples to prepare (appended in turn, cyclically).
        n: N, samples per set.
        keys: flat keys to store.
        block_rows: R.
        seed: data seed.
        samples: the data to store instead of ``make_samples(n * sets, seed)``: flat key →
            ``(n * sets, *D_key)`` (used as given, not copied; must hold ``keys``).
    """

    def __init__(
        self,
        backend: str,
        buffer: Mapping[str, int],
        *,
        n: int,
        sets: int = 1,
        keys: Sequence[str] = DATA_KEYS,
        block_rows: int = BLOCK_ROWS,
        seed: int = 0,
        samples: Mapping[str, np.ndarray] | None = None,
    ):
        if backend not in ("ray", "memory"):
            raise ValueError(f"StoreRig(backend={backend!r}): expected 'ray' or 'memory'")
        self.backend, self.n, self.keys = backend, int(n), tuple(keys)
        if samples is None:
            samples = make_samples(self.n * sets, seed)
        self.arrays = {k: samples[k] for k in self.keys}
        blocks = split_blocks(self.arrays, block_rows)
        self._per_set = len(blocks) // sets
        if backend == "ray":
            import ray

            from kestrel_core import BlockMeta
            from kestrel_ray import RayBufferView, create_store

            self.store = create_store(**buffer)
            self._blocks: list[Any] = [
                ({k: ray.put(v) for k, v in b.items()}, BlockMeta.of(b)) for b in blocks
            ]
            self.view = RayBufferView(self.store)
        else:
            from kestrel_core import InMemoryStore

            self.store = InMemoryStore(**buffer)
            self._blocks = blocks
            self.view = self.store.view()
        self._next = 0

    def append_block(self) -> None:
        """Append the next prepared block (cyclically); returns when the store has it."""
        block = self._blocks[self._next % len(self._blocks)]
        self._next += 1
        self._append([block])

    def append_set(self) -> None:
        """Append the next set of N samples (its blocks in one store call)."""
        start = (self._next // self._per_set) % (len(self._blocks) // self._per_set) * self._per_set
        self._next = start + self._per_set
        self._append(self._blocks[start : start + self._per_set])

    def _append(self, blocks: list[Any]) -> None:
        if self.backend == "ray":
            self.store.appended(self.store.submit_append(blocks))
        else:
            for block in blocks:
                self.store.append(block, len(block[self.keys[0]]))

    def close(self) -> None:
        """Kill the store actor (Ray); drop the blocks."""
        if self.backend == "ray":
            import ray

            ray.kill(self.store.actor)
        self._blocks = []


class LoaderRig:
    """A :class:`~kestrel_torch.CachedDataLoader` over a :class:`StoreRig` of N samples.

    The store keeps N training samples (``max_samples = N``, no validation), so appending a
    new set of N makes the N cached ones TOMBSTONE: the next fetch brings N new rows that the
    training thread scatters into the N rows just freed — the full ``_apply_fetch`` of the
    original design.

    Args:
        n: N.
        device: the cache's device.
        backend: ``"ray"`` or ``"memory"`` (see :class:`StoreRig`).
        keys: flat keys to cache.
    """

    def __init__(self, n: int, device: Any, backend: str = "ray", keys: Sequence[str] = DATA_KEYS):
        from kestrel_torch import CachedDataLoader

        self.rig = StoreRig(
            backend,
            {"min_samples": 0, "max_samples": n, "validation_samples": 0},
            n=n,
            sets=2,
            keys=keys,
        )
        self.rig.append_set()
        self.loader = CachedDataLoader(self.rig.view, keys, device=device, name=f"bench-{n}")
        self.loader.sync()  # the first fill blocks until the cache holds the N samples

    def _wait_fetch(self) -> None:
        # CachedDataLoader has no public "wait without applying"; its in-flight fetch is `_future`.
        future = self.loader._future
        if future is not None:
            concurrent.futures.wait([future])

    def fetch_in_flight(self) -> None:
        """State for ``sync``: N new samples appended, their background fetch just launched.

        Returns after launching it, so the next ``sync()`` finds it running (unless it is faster
        than the caller).
        """
        self.loader.sync(wait=True)  # apply what is in flight, launch a fetch …
        self._wait_fetch()  # … that finishes before the append, so it brings nothing
        self.rig.append_set()
        self.loader.sync(wait=True)  # apply the empty fetch; launch the one that sees the new set

    def fetch_ready(self) -> None:
        """State for ``apply_fetch``: the fetch of the N new samples is done, not yet applied."""
        self.fetch_in_flight()
        self._wait_fetch()

    def close(self) -> None:
        """Stop the loader's thread and the store."""
        self.loader.close()
        self.rig.close()


def empty_cache(n: int, device: Any, keys: Sequence[str] = DATA_KEYS) -> dict[str, Any]:
    """A tensor cache of ``n`` rows for example 05's θ ``(n, 10)``, μ and x ``(n, 1000)``, float64."""
    import torch

    shapes = {"theta.value": (N_PARAMS,), "mu.value": (N_BINS,), "x.value": (N_BINS,)}
    return {k: torch.empty((n, *shapes[k]), dtype=torch.float64, device=device) for k in keys}


def check_cache(
    loader: Any, arrays: Mapping[str, np.ndarray], keys: Sequence[str] = DATA_KEYS
) -> None:
    """Every row a loader caches holds the data of its sample id.

    Sample id i is row ``i mod len(arrays)`` of the data (a :class:`LoaderRig` appends its sets
    of N samples in turn, ids counting up).

    Raises:
        AssertionError: a cached row differs from its sample's data.
    """
    batch = loader.all()
    rows = batch.ids % len(arrays[keys[0]])
    for key in keys:
        np.testing.assert_array_equal(batch[key].cpu().numpy(), arrays[key][rows])


class ReplayRounds:
    """The ``store`` group's round: ``DeployedGraph.sample(n)`` then ``DeployedGraph.append``.

    On a deployed :func:`~kestrel_bench.replay_graph` (three NodeWrapper actors, blocks
    returned as call results): the whole path of a resimulation round except the simulators'
    own CPU. Only the last round's trace is kept, so the blocks the store evicts can be freed.

    Args:
        dg: the deployed graph.
        n: N, samples per round.
    """

    def __init__(self, dg: Any, n: int):
        self.dg, self.n = dg, int(n)
        self.last: Any = None

    def __call__(self) -> np.ndarray:
        """One round; returns the new ids."""
        self.last = None  # drop the previous trace's refs before the next is made
        trace = self.dg.sample(self.n)
        self.last = trace
        return self.dg.append(trace)

    def check(self, ids: np.ndarray) -> None:
        """The last round's ids count up by one; its θ, μ, x have example 05's shapes, and the
        replays lined up (x − μ is the N(0, 0.1²) noise).

        Raises:
            AssertionError: they do not.
        """
        n = self.n
        assert len(ids) == n and np.all(np.diff(ids) == 1)
        arrays = self.dg.to_arrays(self.last)
        assert {k: v.shape for k, v in arrays.items()} == {
            "theta.value": (n, N_PARAMS),
            "mu.value": (n, N_BINS),
            "x.value": (n, N_BINS),
        }
        assert 0.09 < float(np.std(arrays["x.value"] - arrays["mu.value"])) < 0.11
