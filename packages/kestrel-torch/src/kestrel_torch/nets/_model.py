"""The model an estimator trains: the embedding and the head, built, copied and saved together.

Shape symbols: M rows of conditions, E embedding width, D free parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from kestrel_core import EstimatorContext
from kestrel_torch._errors import EstimatorError
from kestrel_torch.nets._embedding import build_embedding
from kestrel_torch.nets._head import PosteriorHead

__all__ = ["EstimatorModel", "build_model"]

#: builds a head from ``(D, E)``
HeadFactory = Callable[[int, int], PosteriorHead]


class EstimatorModel(nn.Module):
    """An estimator's network: its head over the embedding of the conditions,
    ``q(z | embedding(conditions))`` for a posterior head (the likelihood head of NLE models
    the embedding given z instead).

    Attributes:
        embedding: the :class:`~kestrel_torch.Embedding` of the conditions.
        head: the :class:`~kestrel_torch.nets._head.PosteriorHead`.
    """

    def __init__(self, embedding: nn.Module, head: PosteriorHead) -> None:
        super().__init__()
        self.embedding = embedding
        self.head = head

    def embed(self, inputs: Mapping[str, torch.Tensor | None]) -> torch.Tensor:
        """The embedding ``s``, shape ``(M, E)``, of condition tensors with leading dimension M."""
        return self.embedding(inputs)

    def param_groups(self) -> list[dict[str, Any]]:
        """Optimiser parameter groups: every parameter, then the head's decay group if it has one
        (its parameters taken out of the first group)."""
        decay = self.head.decay_group()
        if decay is None:
            return [{"params": list(self.parameters())}]
        decayed = {id(p) for p in decay["params"]}
        return [{"params": [p for p in self.parameters() if id(p) not in decayed]}, decay]


def build_model(
    spec: Any,
    context: EstimatorContext,
    make_head: HeadFactory,
    init: Mapping[str, torch.Tensor],
    device: torch.device,
    seed: int,
) -> EstimatorModel:
    """Build embedding and head from a few rows of the conditions, in training mode.

    The embedding is run once in eval mode on ``init`` to learn its width E; the weights are
    drawn from ``seed`` without touching the global random state.

    Args:
        spec: the ``embedding`` option. context: the node. make_head: ``(D, E) → head``.
        init: condition node → tensor ``(k, *shape)`` on ``device``, k ≥ 1 finite rows.
        device: where the model lives. seed: the model's seed.

    Raises:
        ConfigError: a bad embedding spec.
        EstimatorError: the embedding does not return shape ``(k, E)``.
    """
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        embedding = build_embedding(spec, context.evidence, context.scaffolds).to(device)
        embedding.eval()
        with torch.no_grad():
            s = embedding(init)
        embedding.train()
        if s.dim() != 2 or s.shape[0] != next(iter(init.values())).shape[0]:
            raise EstimatorError(
                f"node {context.node!r}: the embedding returned shape "
                f"{tuple(s.shape)}; expected (B, E)"
            )
        head = make_head(context.prior.dim, int(s.shape[1])).to(device)
    model = EstimatorModel(embedding, head).to(device)
    model.train()
    return model
