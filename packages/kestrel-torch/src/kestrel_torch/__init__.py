"""Kestrel on PyTorch: the cached device loader, embeddings, online normalisation, estimators.

Depends on kestrel-core, torch, zuko and torchdiffeq; never imports ray.
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
    "FlowMatchingPosterior",
    "FlowLikelihood",
    "EnsemblePosterior",
]

from kestrel_torch import embeddings
from kestrel_torch.__about__ import __version__
from kestrel_torch.data._batch import Batch
from kestrel_torch.data._loader import CachedDataLoader
from kestrel_torch.estimators._ensemble import EnsemblePosterior
from kestrel_torch.estimators._flow import FlowPosterior
from kestrel_torch.estimators._flow_matching import FlowMatchingPosterior
from kestrel_torch.estimators._gaussian import GaussianPosterior
from kestrel_torch.estimators._likelihood import FlowLikelihood
from kestrel_torch.estimators._stepwise import StepwiseEstimator
from kestrel_torch.nets._embedding import Embedding, build_embedding
from kestrel_torch.nets._norm import RunningNorm
