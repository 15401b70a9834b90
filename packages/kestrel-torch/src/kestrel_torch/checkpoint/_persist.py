"""Checkpoints of a :class:`~kestrel_torch.estimators._stepwise.StepwiseEstimator`: its whole training
state as bytes (for the driver to write) or as ``<directory>/estimator.pt``.

The format is :mod:`._checkpoint`'s: tensors and plain containers only, read back with
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

__all__ = ["Checkpointing"]


class Checkpointing:
    """The save/load methods of an estimator (a mixin of ``StepwiseEstimator``)."""

    options: EstimatorOptions
    _fit: FitState
    _init: dict[str, torch.Tensor]
    _bound: Callable[[], Binding]
    _start: Callable[[Mapping[str, torch.Tensor]], None]

    def _header(self) -> dict[str, Any]:
        context = self._bound().context
        return {
            "estimator": type(self).__name__,
            "node": context.node,
            "latent_dim": int(context.prior.dim),
            "lr_option": float(self.options.lr),
        }

    def save_bytes(self) -> bytes:
        """The checkpoint as bytes: current and best models, optimiser, schedule, epoch counter.

        Tensors and plain containers only, for ``torch.load(weights_only=True)`` (:meth:`load_bytes`).

        Raises:
            EstimatorError: :meth:`setup` was not called.
        """
        return checkpoint.to_bytes(checkpoint.pack(self._fit, self._header(), self._init))

    def load_bytes(self, data: bytes, *, source: str = "checkpoint bytes") -> None:
        """Restore what :meth:`save_bytes` returned, onto this estimator's device.

        Training resumes from the loaded weights, optimiser and best model; ``total_epochs`` continues.

        Args:
            data: the checkpoint. source: its name in messages.

        Raises:
            CheckpointError: (an :class:`~kestrel_core.EstimatorError`) not a checkpoint, or
                one of another estimator class or parameter dimension.
        """
        payload = checkpoint.from_bytes(data, self._bound().device, source=source)
        checkpoint.unpack(payload, self._fit, self._header(), self._start, source=source)

    def save(self, directory: str) -> None:
        """Write :meth:`save_bytes` to ``<directory>/estimator.pt`` (atomically).

        Raises:
            CheckpointError: (an :class:`~kestrel_core.EstimatorError`) the file cannot be written.
        """
        checkpoint.write_checkpoint(Path(directory) / checkpoint.CHECKPOINT_FILE, self.save_bytes())

    def load(self, directory: str) -> None:
        """Restore ``<directory>/estimator.pt`` (see :meth:`load_bytes`).

        Raises:
            CheckpointError: no checkpoint, or one of another class or parameter dimension.
        """
        path = Path(directory) / checkpoint.CHECKPOINT_FILE
        self._bound()
        self.load_bytes(checkpoint.read_checkpoint(path), source=f"checkpoint {str(path)!r}")
