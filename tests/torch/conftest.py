"""Fixtures for the kestrel-torch tests (helpers live in ``torchtest_helpers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import kestrel_core
from kestrel_torch import CachedDataLoader

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Every device the machine has: the loader tests run on CUDA too where it exists."""
    return request.param


@pytest.fixture
def make_store() -> Callable[..., kestrel_core.InMemoryStore]:
    """Build a ``kestrel_core.InMemoryStore`` with the given buffer sizes."""

    def make(
        min_samples: int = 0, max_samples: int = 1000, validation_samples: int = 0
    ) -> kestrel_core.InMemoryStore:
        return kestrel_core.InMemoryStore(
            min_samples=min_samples, max_samples=max_samples, validation_samples=validation_samples
        )

    return make


@pytest.fixture
def open_loader() -> Iterator[Callable[..., CachedDataLoader]]:
    """``CachedDataLoader`` factory whose loaders are closed at teardown, even on failure."""
    made: list[CachedDataLoader] = []

    def make(*args: Any, **kwargs: Any) -> CachedDataLoader:
        loader = CachedDataLoader(*args, **kwargs)
        made.append(loader)
        return loader

    yield make
    for loader in made:
        loader.close()
