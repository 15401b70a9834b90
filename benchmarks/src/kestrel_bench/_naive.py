"""The naive reference ("before") paths, written plainly: what ``ORIGIN.md`` measured as "before".

These functions are the in-run baselines of the benchmark groups. They are deliberately the
straightforward per-sample code of the previous system (one ObjectRef per sample per key, one
tensor per sample), not strawmen: where the original was batched (one ``ray.get`` over all
refs), so is the baseline here. Shape symbols: N samples, D_key a key's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = [
    "naive_resolve",
    "put_per_sample",
    "put_thread_pool",
    "fetch_per_sample",
    "apply_per_sample",
    "blocking_fetch_and_apply",
    "TensorSet",
]


def naive_resolve(refs: Sequence[Any]) -> np.ndarray:
    """Resolve one condition given as N per-sample refs: one ``ray.get`` over all, then stack.

    The original ``_resolve_refs`` before broadcast detection: the observation shared by all N
    samples arrives as N refs (all the same object) and is materialised N times.

    Args:
        refs: N ObjectRefs, each to an array ``D``.

    Returns:
        float64 ``(N, *D)``, a new array.
    """
    import ray

    return np.stack(ray.get(list(refs)))


def put_per_sample(arrays: Mapping[str, np.ndarray]) -> dict[str, list[Any]]:
    """One ``ray.put`` per sample per key, sequentially (the original ``_batch_to_refs``).

    Args:
        arrays: flat key → ``(N, *D_key)``.

    Returns:
        flat key → N ObjectRefs, one per row.
    """
    import ray

    return {key: [ray.put(row) for row in value] for key, value in arrays.items()}


def put_thread_pool(arrays: Mapping[str, np.ndarray], workers: int = 4) -> dict[str, list[Any]]:
    """:func:`put_per_sample` through a ``ThreadPoolExecutor(workers)`` (the original's "fix").

    Returns:
        flat key → N ObjectRefs, in row order.
    """
    import ray

    with ThreadPoolExecutor(workers) as pool:
        return {key: list(pool.map(ray.put, value)) for key, value in arrays.items()}


def fetch_per_sample(refs: Mapping[str, Sequence[Any]]) -> dict[str, np.ndarray]:
    """Read per-sample refs: one ``ray.get`` over a key's N refs, then ``np.stack``.

    Args:
        refs: flat key → N ObjectRefs, each to an array ``D_key``.

    Returns:
        flat key → new array ``(N, *D_key)``.
    """
    import ray

    return {key: np.stack(ray.get(list(value))) for key, value in refs.items()}


def apply_per_sample(
    cache: Mapping[str, Any], rows: Any, samples: Mapping[str, Sequence[np.ndarray]], device: Any
) -> None:
    """Put fetched samples into a tensor cache the original way, on the calling (training) thread.

    Per sample and key: ``np.array`` (copy out of the object store) → ``torch.as_tensor`` →
    ``.to(device)``; then the rows are stacked and scattered into ``rows`` of the cache.

    Args:
        cache: flat key → tensor ``(C, *D_key)`` on ``device``; modified in place.
        rows: int64 tensor ``(N,)`` on ``device``: the free cache rows that receive the samples.
        samples: flat key → N arrays ``D_key`` (as ``ray.get`` of per-sample refs returns them).
        device: the cache's ``torch.device``.
    """
    import torch

    for key, values in samples.items():
        tensors = [torch.as_tensor(np.array(v)).to(device) for v in values]
        cache[key][rows] = torch.stack(tensors)


def blocking_fetch_and_apply(
    refs: Mapping[str, Sequence[Any]], cache: Mapping[str, Any], rows: Any, device: Any
) -> None:
    """The original blocking ``sync()``: per-sample gets and :func:`apply_per_sample`, all on the
    training thread.

    Args:
        refs: flat key → N per-sample ObjectRefs.
        cache, rows, device: as :func:`apply_per_sample`.
    """
    import ray

    apply_per_sample(
        cache, rows, {key: ray.get(list(value)) for key, value in refs.items()}, device
    )


class TensorSet:
    """An in-memory tensor training set: the baseline data source of the ``training`` group.

    Shape symbols: C rows, B batch size.

    Args:
        tensors: flat key → tensor ``(C, *D_key)``, all on one device (used as they are).
    """

    def __init__(self, tensors: Mapping[str, Any]):
        self._tensors = dict(tensors)
        first = next(iter(self._tensors.values()))
        self._count, self._device = int(first.shape[0]), first.device

    @property
    def count(self) -> int:
        """C, the number of rows."""
        return self._count

    def sample_batch(self, batch_size: int, generator: Any = None) -> Any:
        """B rows drawn uniformly with replacement, as a :class:`kestrel_torch.Batch` on the device."""
        import torch

        from kestrel_torch import Batch

        pos = torch.randint(self._count, (batch_size,), device=self._device, generator=generator)
        return Batch(pos, {key: t[pos] for key, t in self._tensors.items()})
