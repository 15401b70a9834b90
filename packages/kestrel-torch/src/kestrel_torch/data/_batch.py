"""A training batch: flat key → tensor, plus the sample ids it was drawn from."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView

import numpy as np
import torch

from kestrel_core import BufferView
from kestrel_torch._errors import EstimatorError

__all__ = ["Batch"]


class Batch(Mapping[str, torch.Tensor]):
    """B samples drawn from a :class:`~kestrel_torch.CachedDataLoader`.

    A read-only mapping from flat key (``"theta.value"``) to a tensor of shape ``(B, *D)`` on
    the cache's device. The tensors are copies (the loader gathers rows with fancy indexing),
    so editing them in place changes neither the cache nor the store.

    ``len(batch)`` is B, the number of samples — not the number of keys; :meth:`keys`,
    :meth:`values` and :meth:`items` are the key views of the underlying dict.

    Args:
        ids: sample ids, int64, shape ``(B,)``: a numpy array or an int64 tensor (possibly on
            the device; it is copied to the host only when :attr:`ids` or :meth:`discard`
            needs it, so drawing a batch never waits for the device).
        data: flat key → tensor ``(B, *D)``.
        view: the store view the samples came from; :meth:`discard` reports to it.

    Raises:
        ValueError: a tensor's leading dimension differs from ``len(ids)``.
    """

    def __init__(
        self,
        ids: np.ndarray | torch.Tensor,
        data: Mapping[str, torch.Tensor],
        view: BufferView | None = None,
    ) -> None:
        self._ids_tensor: torch.Tensor | None = None
        self._ids_array: np.ndarray | None = None
        if isinstance(ids, torch.Tensor):
            self._ids_tensor = ids.reshape(-1).to(torch.int64)
            n = self._ids_tensor.shape[0]
        else:
            self._ids_array = np.asarray(ids, dtype=np.int64).reshape(-1)
            n = self._ids_array.shape[0]
        for key, value in data.items():
            if value.shape[:1] != (n,):
                raise ValueError(
                    f"Batch: key {key!r} has shape {tuple(value.shape)}, expected leading dimension {n}"
                )
        self._n = n
        self._data = dict(data)
        self._view = view

    @property
    def ids(self) -> np.ndarray:
        """Sample ids of the rows, int64 numpy array, shape ``(B,)`` (do not modify)."""
        if self._ids_array is None:
            assert self._ids_tensor is not None  # internal: one of the two is always set
            self._ids_array = self._ids_tensor.cpu().numpy()
        return self._ids_array

    @property
    def view(self) -> BufferView | None:
        """The store view :meth:`discard` reports to."""
        return self._view

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def values(self) -> ValuesView[torch.Tensor]:
        return self._data.values()

    def items(self) -> ItemsView[str, torch.Tensor]:
        return self._data.items()

    def discard(self, mask: np.ndarray | torch.Tensor | None) -> int:
        """Mark the samples selected by ``mask`` DISFAVOURED in the store.

        One ``view.discard`` call with the selected ids; none if the mask selects nothing. The
        store moves only TRAINING samples (others keep their status). Validation code must not
        call this.

        Args:
            mask: bool, shape ``(B,)``, numpy or torch (any device); ``None`` does nothing.

        Returns:
            The number of ids reported (rows drawn twice count twice).

        Raises:
            ValueError: ``mask`` is not boolean of shape ``(B,)``.
            EstimatorError: the mask selects samples but the batch has no view.
        """
        if mask is None:
            return 0
        if isinstance(mask, torch.Tensor):
            if mask.dtype != torch.bool or tuple(mask.shape) != (self._n,):
                raise ValueError(
                    f"Batch.discard: mask must be bool of shape ({self._n},), "
                    f"found {mask.dtype} {tuple(mask.shape)}"
                )
            if self._ids_tensor is not None and self._ids_tensor.device == mask.device:
                selected = self._ids_tensor[mask].cpu().numpy()
            else:
                selected = self.ids[mask.cpu().numpy()]
        else:
            array = np.asarray(mask)
            if array.dtype != np.bool_ or array.shape != (self._n,):
                raise ValueError(
                    f"Batch.discard: mask must be bool of shape ({self._n},), "
                    f"found {array.dtype} {array.shape}"
                )
            selected = self.ids[array]
        if selected.size == 0:
            return 0
        if self._view is None:
            raise EstimatorError(
                f"Batch.discard: {selected.size} samples selected but the batch has no store view"
            )
        self._view.discard(selected)
        return int(selected.size)

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{k}: {tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}"
            for k, v in self._data.items()
        )
        return f"Batch(B={self._n}, {{{fields}}})"
