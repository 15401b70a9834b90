"""Checkpoints of a :class:`~kestrel_torch.estimators._stepwise.StepwiseEstimator`: its whole training
state as bytes (for the driver to write) or as ``<directory>/estimator.pt``.

:class:`Checkpoints` is the part of the estimator that makes and restores them (the estimator
holds one and its ``save_bytes``, ``load_bytes``, ``save`` and ``load`` delegate to it). The
format is :mod:`._state`'s: tensors and plain containers only, read back with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

import kestrel_torch.checkpoint._state as checkpoint
from kestrel_torch.estimators._binding import Binding
from kestrel_torch.estimators._options import EstimatorOptions
from kestrel_torch.train._fit import FitState

__all__ = ["Checkpoints"]


class Checkpoints:
    """The save and load methods of one estimator (held by ``StepwiseEstimator``, whose
    ``save_bytes``, ``load_bytes``, ``save`` and ``load`` delegate here; arguments and errors
    as documented there).

    Args:
        estimator: the estimator's class name (checked on load).
        options: its options (the ``lr`` option is recorded in the header).
        fit: its training state, packed on save and restored in place on load.
        bound: returns its :class:`~kestrel_torch.estimators._binding.Binding` (raises
            ``EstimatorError`` before ``setup``).
        init: returns the condition rows its model was built from (packed on save).
        start: builds a fresh model from such rows (called on load, before the weights are
            restored).
    """

    def __init__(
        self,
        estimator: str,
        options: EstimatorOptions,
        fit: FitState,
        bound: Callable[[], Binding],
        init: Callable[[], Mapping[str, torch.Tensor]],
        start: Callable[[Mapping[str, torch.Tensor]], None],
    ) -> None:
        self._estimator = estimator
        self._options = options
        self._fit = fit
        self._bound = bound
        self._init = init
        self._start = start

    def _header(self) -> dict[str, Any]:
        context = self._bound().context
        return {
            "estimator": self._estimator,
            "node": context.node,
            "latent_dim": int(context.prior.dim),
            "lr_option": float(self._options.lr),
        }

    def save_bytes(self) -> bytes:
        """The checkpoint as bytes (see ``StepwiseEstimator.save_bytes``)."""
        return checkpoint.to_bytes(checkpoint.pack(self._fit, self._header(), self._init()))

    def load_bytes(self, data: bytes, *, source: str = "checkpoint bytes") -> None:
        """Restore what :meth:`save_bytes` returned (see ``StepwiseEstimator.load_bytes``)."""
        payload = checkpoint.from_bytes(data, self._bound().device, source=source)
        checkpoint.unpack(payload, self._fit, self._header(), self._start, source=source)

    def save(self, directory: str) -> None:
        """Write :meth:`save_bytes` to ``<directory>/estimator.pt`` (atomically)."""
        checkpoint.write_checkpoint(Path(directory) / checkpoint.CHECKPOINT_FILE, self.save_bytes())

    def load(self, directory: str) -> None:
        """Restore ``<directory>/estimator.pt`` (see :meth:`load_bytes`)."""
        path = Path(directory) / checkpoint.CHECKPOINT_FILE
        self._bound()
        self.load_bytes(checkpoint.read_checkpoint(path), source=f"checkpoint {str(path)!r}")
