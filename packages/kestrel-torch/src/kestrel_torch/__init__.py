"""Kestrel on PyTorch: the cached device loader, embeddings, online normalisation, estimators.

Depends on kestrel-core, torch and zuko; never imports ray.
"""

__all__ = [
    "__version__",
    # data side: loader, batches, normalisation, embeddings
    "Batch",
    "CachedDataLoader",
    "RunningNorm",
    "Embedding",
    "build_embedding",
    "embeddings",
    # estimators
    "StepwiseEstimator",
    "GaussianPosterior",
    "FlowPosterior",
    "FlowLikelihood",
]

from . import embeddings
from .__about__ import __version__
from ._batch import Batch
from ._embedding import Embedding, build_embedding
from ._estimator import StepwiseEstimator
from ._flow import FlowPosterior
from ._gaussian import GaussianPosterior
from ._likelihood import FlowLikelihood
from ._loader import CachedDataLoader
from ._norm import RunningNorm
