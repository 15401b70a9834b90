"""An estimator bound to its node: the context checked, the device resolved, randomness seeded.

The estimator's ``seed`` option (else the context's seed) fixes **training**: the model's
initial weights and the training batches (with the head's training randomness and, through
:func:`~kestrel_torch.train._rng.own_randomness`, dropout and every other draw from torch's global
generator in a training step). It does not fix sampling: a sampling call given an ``rng``
draws from it, and one without draws from the sampling streams here, seeded from the
context's seed (the run's stream for the node; fresh entropy without one). Each stream is its
own, so sampling calls between training steps do not change which batches training sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kestrel_core import EstimatorContext
from kestrel_torch._errors import ConfigError, EstimatorError
from kestrel_torch.data._rows import Columns
from kestrel_torch.estimators._loss import EstimatorLoss
from kestrel_torch.estimators._options import EstimatorOptions

__all__ = ["Binding", "resolve_device"]

_PRIOR_METHODS = ("dim", "full_dim", "sample", "log_prob", "to_normal", "from_normal")


def resolve_device(device: Any, owner: str) -> torch.device:
    """The torch device of the ``device`` option ("auto": CUDA when available).

    Raises:
        ConfigError: an unknown device, or CUDA asked for where there is none.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"{owner}(device={device!r}): {err}") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{owner}(device={device!r}): CUDA is not available on this machine")
    return dev


@dataclass(frozen=True)
class Binding:
    """What :meth:`~kestrel_torch.StepwiseEstimator.setup` fixes for the estimator's life.

    Attributes:
        context: the node. columns: its buffer columns. device: the training device.
        model_seed: seed of the model's initial weights.
        rng: numpy generator of prior draws of calls without their own ``rng``.
        batch_generator: torch generator (on the device) of training batches, refit rows and
            the global torch randomness of each training step.
        sample_generator: torch generator (on the device) of posterior and proposal draws of
            calls without their own ``rng``.
        loss: the NPE loss on the node's columns (its counters run over the estimator's life).
    """

    context: EstimatorContext
    columns: Columns
    device: torch.device
    model_seed: int
    rng: np.random.Generator
    batch_generator: torch.Generator
    sample_generator: torch.Generator
    loss: EstimatorLoss

    @classmethod
    def create(cls, context: EstimatorContext, options: EstimatorOptions, owner: str) -> Binding:
        """Check the context, resolve the device and seed every stream: the training streams
        from ``options.seed`` (else the context's seed), the sampling streams from the
        context's seed only.

        Raises:
            EstimatorError: the prior lacks the standard-normal bijection, or the node has no
                evidence to condition on.
            ConfigError: an unknown device.
        """
        prior = context.prior
        for attr in _PRIOR_METHODS:
            if not hasattr(prior, attr):
                raise EstimatorError(
                    f"node {context.node!r}: {owner} needs a prior with {attr!r} "
                    f"(a kestrel_core.Product); got {type(prior).__name__}"
                )
        if not context.evidence:
            raise EstimatorError(f"node {context.node!r}: {owner} needs at least one evidence node")
        device = resolve_device(options.device, owner)
        seq = np.random.SeedSequence(options.seed if options.seed is not None else context.seed)
        model_seed, batch_seed = (int(s) for s in seq.generate_state(2, dtype=np.uint32))
        # sampling never from options.seed: a fixed estimator seed fixes training only
        draw_seq = np.random.SeedSequence(context.seed)
        sample_seed = int(draw_seq.generate_state(3, dtype=np.uint32)[2])
        columns = Columns.of(context)
        rng = np.random.default_rng(draw_seq.spawn(1)[0])
        batches = torch.Generator(device).manual_seed(batch_seed)
        draws = torch.Generator(device).manual_seed(sample_seed)
        discard_below = options.log_ratio_threshold if options.discard_samples else None
        loss = EstimatorLoss(columns, batches, discard_below)
        return cls(context, columns, device, model_seed, rng, batches, draws, loss)
