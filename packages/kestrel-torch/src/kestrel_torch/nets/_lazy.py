"""Buffers whose shape is fixed by the first forward call, and still load into a fresh module."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["LazyBuffers"]


class LazyBuffers(nn.Module):
    """Base class for modules with buffers sized on the first call.

    Subclasses register each lazy buffer as an empty tensor and list its name in
    ``_lazy_buffers``. A fresh module (buffers still empty) then loads the ``state_dict`` of a
    trained one: the buffers are resized to the incoming shapes before the copy, which
    ``nn.Module.load_state_dict`` would otherwise reject as a size mismatch.
    """

    _lazy_buffers: tuple[str, ...] = ()

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        for name in self._lazy_buffers:
            incoming = state_dict.get(prefix + name)
            current = self._buffers.get(name)
            if (
                isinstance(incoming, torch.Tensor)
                and current is not None
                and current.shape != incoming.shape
            ):
                self._buffers[name] = torch.empty(
                    incoming.shape, dtype=current.dtype, device=current.device
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
