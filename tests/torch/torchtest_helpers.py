"""Helpers for the kestrel-torch tests: sample blocks, views that block or fail on demand."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from kestrel_core import Fetch

KEYS = ("theta.value", "theta.log_prob", "x.value")


def trace(
    n: int, start: float = 0.0, *, d: int = 3, dtype: type = np.float64
) -> dict[str, np.ndarray]:
    """A block of ``n`` samples whose values encode their row: ``x.value[i, 0] == start + i``."""
    base = (start + np.arange(n, dtype=np.float64))[:, None]
    return {
        "theta.value": np.repeat(base, 2, axis=1),
        "theta.log_prob": -base[:, 0],
        "x.value": (base + np.arange(d) / 10).astype(dtype),
    }


def append(store: object, n: int, *, dtype: type = np.float64) -> np.ndarray:
    """Append ``n`` samples whose values encode their sample id (``x.value[:, 0] == id``)."""
    start = store.stats()["total"]  # type: ignore[attr-defined]
    ids = store.append(trace(n, start, dtype=dtype), n)  # type: ignore[attr-defined]
    assert ids.tolist() == list(range(start, start + n))
    return ids


class ScriptedView:
    """A BufferView that returns prepared fetches, for inputs a real store would refuse.

    ``fetches`` are ``(active_ids, new_ids, arrays)`` returned one per call; after the
    last, the same active ids again with no new ids. Records every ``held_ids`` and ``discard`` call.
    """

    def __init__(
        self,
        fetches: Sequence[tuple[Sequence[int], Sequence[int], dict[str, np.ndarray]]],
        stats: dict[str, int] | None = None,
    ) -> None:
        self._fetches = list(fetches)
        self._next = 0
        self._stats = stats or {}
        self.held: list[np.ndarray] = []
        self.discarded: list[np.ndarray] = []

    def fetch(
        self,
        statuses: Sequence[int],
        keys: Sequence[str],
        *,
        max_samples: int = 0,
        held_ids: np.ndarray | None = None,
    ) -> Fetch:
        self.held.append(np.asarray(held_ids if held_ids is not None else [], dtype=np.int64))
        active, new, arrays = self._fetches[min(self._next, len(self._fetches) - 1)]
        if self._next >= len(self._fetches):
            new, arrays = [], {k: v[:0] for k, v in arrays.items()}
        self._next += 1
        return Fetch(
            np.asarray(active, dtype=np.int64), np.asarray(new, dtype=np.int64), dict(arrays)
        )

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        self.discarded.append(np.asarray(ids))

    def stats(self) -> dict[str, int]:
        return dict(self._stats)


class GatedView:
    """Wraps a view; fetch call number ``gate_from`` and later ones wait for ``gate`` (an Event),
    call number ``fail_on`` raises ``RuntimeError("fetch failed on purpose")``. Calls count from 1."""

    def __init__(
        self, view: object, *, gate_from: int | None = None, fail_on: int | None = None
    ) -> None:
        self.view = view
        self.gate = threading.Event()
        self.gate_from = gate_from
        self.fail_on = fail_on
        self.waiting = threading.Event()  # set while a fetch waits for the gate
        self.calls = 0

    def fetch(self, *args: object, **kwargs: object) -> Fetch:
        self.calls += 1
        if self.gate_from is not None and self.calls >= self.gate_from:
            self.waiting.set()
            if not self.gate.wait(timeout=30):
                raise TimeoutError("GatedView: gate never opened")
            self.waiting.clear()
        if self.calls == self.fail_on:
            raise RuntimeError("fetch failed on purpose")
        return self.view.fetch(*args, **kwargs)  # type: ignore[attr-defined]

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        self.view.discard(ids)  # type: ignore[attr-defined]

    def stats(self) -> dict[str, int]:
        return self.view.stats()  # type: ignore[attr-defined]


class SlowView:
    """Wraps a view; every fetch after the first sleeps ``delay`` seconds first: a loaded
    machine's background thread, made reliable. ``calls`` counts the fetches."""

    def __init__(self, view: object, delay: float) -> None:
        self.view = view
        self.delay = delay
        self.calls = 0

    def fetch(self, *args: object, **kwargs: object) -> Fetch:
        self.calls += 1
        if self.calls > 1:
            time.sleep(self.delay)
        return self.view.fetch(*args, **kwargs)  # type: ignore[attr-defined]

    def discard(self, ids: Sequence[int] | np.ndarray) -> None:
        self.view.discard(ids)  # type: ignore[attr-defined]

    def stats(self) -> dict[str, int]:
        return self.view.stats()  # type: ignore[attr-defined]


@contextmanager
def cpu_burner() -> Iterator[None]:
    """A process that burns a CPU core while the block runs (load beside the test)."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        burner.kill()
        burner.wait()


def refresh(loader: object) -> None:
    """Make the cache reflect the store as it is now (two waiting syncs, see ``sync``)."""
    loader.sync(wait=True)  # type: ignore[attr-defined]
    loader.sync(wait=True)  # type: ignore[attr-defined]


def stored(
    store: object, keys: Sequence[str], statuses: Sequence[int]
) -> dict[int, dict[str, np.ndarray]]:
    """The store's live samples in ``statuses``: id → {key: per-sample array}."""
    fetched = store.view().fetch(statuses, keys)  # type: ignore[attr-defined]
    return {int(i): {k: fetched.arrays[k][r] for k in keys} for r, i in enumerate(fetched.new_ids)}


# -- embedding modules used through ``_target_`` -------------------------------------------------


class Recorder(nn.Module):
    """Records the shapes it is called with (``None`` for a missing input); concatenates."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale
        self.seen: list[tuple[int, ...] | None] = []

    def forward(self, *inputs: torch.Tensor | None) -> torch.Tensor:
        self.seen = [None if t is None else tuple(t.shape) for t in inputs]
        present = [t.reshape(t.shape[0], -1) for t in inputs if t is not None]
        return torch.cat(present, dim=1) * self.scale


class Wrapped(nn.Module):
    """Takes a module built from a nested ``_target_`` and an optional list of modules."""

    def __init__(self, inner: nn.Module, extras: list | None = None, offset: float = 0.0) -> None:
        super().__init__()
        self.inner = inner
        self.extras = nn.ModuleList(extras or [])
        self.offset = offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) + self.offset


class BasisEmbedding(nn.Module):
    """K13: a basis kept as a plain attribute, set on the first training forward from the data,
    kept across copies and checkpoints through ``get_extra_state``/``set_extra_state``."""

    def __init__(self, k: int = 2) -> None:
        super().__init__()
        self.k = k
        self.basis: torch.Tensor | None = None  # plain attribute, not a buffer
        self.linear = nn.Linear(k, 2, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.basis is None:
            self.basis = (
                torch.linalg.svd(x.detach(), full_matrices=False).Vh[: self.k].T.contiguous()
            )
        basis = (
            self.basis if self.basis is not None else torch.eye(x.shape[1], self.k, dtype=x.dtype)
        )
        return self.linear(x @ basis)

    def get_extra_state(self) -> dict:
        return {"basis": self.basis}

    def set_extra_state(self, state: dict) -> None:
        self.basis = state["basis"]
