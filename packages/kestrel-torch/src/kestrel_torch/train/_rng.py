"""Randomness an estimator owns: training steps that draw from its generator, not torch's.

Dropout and any other module that draws from torch's *global* generator would make training
depend on whatever else ran in the process (another estimator, a sampling call, user code).
:func:`own_randomness` runs a block with torch's global generators (CPU and the training
device) seeded from the estimator's own generator and restores them afterwards, so the same
estimator seed gives the same weights whatever happened around it — and the block leaves
torch's global state as it found it.

Sampling calls given a seed draw from it (:func:`call_generator`), never from the estimator's
training streams: a fixed estimator ``seed`` fixes training only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeAlias

import numpy as np
import torch

__all__ = ["own_randomness", "step_generator", "call_generator", "CallRng"]

#: a sampling call's generator, or ``None`` for the estimator's own sampling stream
CallRng: TypeAlias = "np.random.Generator | None"

_SEED_BOUND = 2**62
_OFFSET = 0x9E3779B97F4A7C15  # keeps the step stream apart from the batch stream


def step_generator(training: torch.Generator) -> torch.Generator:
    """A CPU generator for :func:`own_randomness`, seeded from the estimator's training
    generator's seed without drawing from it (so the training batches stay as they were)."""
    return torch.Generator().manual_seed((training.initial_seed() + _OFFSET) % _SEED_BOUND)


@contextmanager
def own_randomness(generator: torch.Generator, device: torch.device) -> Iterator[None]:
    """Run the block with torch's global generators seeded from ``generator``.

    Draws one seed from ``generator`` (which thereby advances), seeds the global CPU
    generator and, on a CUDA ``device``, that device's global generator with it, and restores
    both states on exit.

    Args:
        generator: a CPU generator the estimator owns (:func:`step_generator`).
        device: the training device.
    """
    seed = int(torch.randint(_SEED_BOUND, (1,), generator=generator))
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


def call_generator(rng: np.random.Generator, device: torch.device) -> torch.Generator:
    """A torch generator on ``device`` seeded from a sampling call's numpy generator."""
    return torch.Generator(device).manual_seed(int(rng.integers(_SEED_BOUND)))
