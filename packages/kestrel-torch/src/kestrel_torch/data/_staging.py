"""Host → device copies for the loader's background thread, pinned and overlapped on CUDA.

On a CUDA device an array is first copied into a **pinned** (page-locked) host buffer and then
sent to the device with a ``non_blocking`` copy on a side stream, so the DMA overlaps with the
training thread's kernels. A pinned buffer may be refilled only after the copy that reads it has
finished: each buffer of a small ring carries the CUDA event recorded after its copy, and the
ring waits on that event before handing the buffer out again. Without that wait, the next
``np.copyto`` would overwrite memory the DMA engine is still reading and the device would receive
a mix of two batches.

On the CPU the same call makes one owned copy (cast, made contiguous, writable), so a cache
built from it never aliases — and never writes into — an array that came from the store.

References:
    PyTorch notes, "CUDA semantics — use pinned memory buffers" and ``Tensor.record_stream``.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["HostToDevice", "StagingRing", "numpy_dtype", "torch_dtype"]


@functools.cache
def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The numpy dtype of a torch dtype, or ``None`` where numpy has none (``bfloat16``)."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return None


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy dtype.

    Raises:
        TypeError: numpy dtype without a torch equivalent (object, strings, …).
    """
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def copy_into(dst: torch.Tensor, array: np.ndarray) -> None:
    """Copy ``array`` into the CPU tensor ``dst`` (same shape), casting to ``dst.dtype``.

    Works for read-only and non-contiguous arrays without a "not writable" warning: the array
    is only read, never wrapped by ``torch.from_numpy``.
    """
    target = numpy_dtype(dst.dtype)
    if target is not None:
        np.copyto(dst.numpy(), array, casting="unsafe")
    else:  # bfloat16 has no numpy dtype: go through an owned float32 copy
        dst.copy_(torch.from_numpy(np.array(array, dtype=np.float32, order="C", copy=True)))


@dataclass
class _Slot:
    buffer: torch.Tensor | None = None  # uint8 host buffer, pinned on CUDA
    event: Any = None  # event recorded after the last copy that read ``buffer``


class StagingRing:
    """A ring of reusable host buffers guarded by completion events.

    Args:
        slots: number of buffers (≥ 1); more slots let more copies be in flight.
        pin: allocate page-locked memory (needs CUDA).

    A buffer is handed out by :meth:`acquire` only after the event of its previous copy has
    completed (``event.synchronize()`` blocks the calling — background — thread, never the
    training thread). Buffers grow geometrically and are never shrunk.
    """

    def __init__(self, slots: int = 4, *, pin: bool = True) -> None:
        if slots < 1:
            raise ValueError(f"StagingRing(slots={slots}): expected at least 1 slot")
        self._slots = [_Slot() for _ in range(slots)]
        self._next = 0
        self._pin = pin

    def acquire(self, nbytes: int) -> _Slot:
        """Return the next slot with a buffer of at least ``nbytes`` that no copy is reading."""
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if slot.event is not None:
            slot.event.synchronize()
            slot.event = None
        if slot.buffer is None or slot.buffer.numel() < nbytes:
            size = max(nbytes, 2 * (0 if slot.buffer is None else slot.buffer.numel()))
            slot.buffer = torch.empty(size, dtype=torch.uint8, pin_memory=self._pin)
        return slot

    @staticmethod
    def view(slot: _Slot, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """The first bytes of the slot's buffer as a tensor of ``dtype`` and ``shape``."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty(0, dtype=dtype).element_size()
        assert slot.buffer is not None  # internal: acquire() always allocates
        return slot.buffer[:nbytes].view(dtype).view(shape)


class HostToDevice:
    """Copy numpy arrays into fresh tensors on one device; used by one thread only.

    Args:
        device: target device. ``cuda`` devices use pinned staging, a side stream and events;
            every other device gets an owned CPU tensor (moved with ``.to`` if not CPU).
        slots: staging buffers in the ring (CUDA only).

    Tensors returned on CUDA were written on a side stream: call :meth:`wait` before handing
    them to another thread, and have the consumer call ``tensor.record_stream(its stream)``
    (the loader does both).
    """

    def __init__(self, device: torch.device | str, *, slots: int = 4) -> None:
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._ring: StagingRing | None = None
        self._stream: Any = None
        if self._cuda:
            self._ring = StagingRing(slots, pin=True)
            self._stream = torch.cuda.Stream(self.device)

    def copy(self, array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        """A new tensor on :attr:`device` holding ``array`` cast to ``dtype``.

        Args:
            array: any numpy array (may be read-only or non-contiguous), shape ``S``.
            dtype: dtype of the result.

        Returns:
            Tensor of shape ``S`` that owns its memory (never aliases ``array``).
        """
        shape = tuple(array.shape)
        if not self._cuda:
            host = torch.empty(shape, dtype=dtype)
            copy_into(host, array)
            return host if self.device.type == "cpu" else host.to(self.device)
        assert self._ring is not None  # internal: set for CUDA in __init__
        with torch.cuda.stream(self._stream):
            out = torch.empty(shape, dtype=dtype, device=self.device)
            if out.numel() == 0:
                return out
            slot = self._ring.acquire(out.numel() * out.element_size())
            host = StagingRing.view(slot, dtype, shape)
            copy_into(host, array)
            out.copy_(host, non_blocking=True)
            slot.event = torch.cuda.Event()
            slot.event.record(self._stream)
        return out

    def after(self, event: Any) -> None:
        """Order later copies after ``event`` (a CUDA event of another stream); no-op off CUDA."""
        if self._stream is not None and event is not None:
            self._stream.wait_event(event)

    def regrow(
        self, tensor: torch.Tensor, rows: int, capacity: int, dtype: torch.dtype
    ) -> torch.Tensor:
        """A new ``(capacity, *D)`` tensor of ``dtype`` whose first ``rows`` rows copy ``tensor``'s.

        Args:
            tensor: ``(C, *D)`` on :attr:`device`; only read.
            rows: leading rows to copy (≤ C and ≤ ``capacity``); the rest stay uninitialised.
            capacity: rows of the result.
            dtype: dtype of the result (casts on copy).
        """
        with self._on_stream():
            out = torch.empty((capacity, *tensor.shape[1:]), dtype=dtype, device=self.device)
            out[:rows] = tensor[:rows]
        return out

    def write(self, dst: torch.Tensor, start: int, src: torch.Tensor) -> None:
        """``dst[start:start + len(src)] = src`` on the transfer stream (both on :attr:`device`)."""
        with self._on_stream():
            dst[start : start + src.shape[0]] = src

    def scatter(self, dst: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> None:
        """``dst[rows] = src`` on the transfer stream (all on :attr:`device`)."""
        with self._on_stream():
            dst.index_copy_(0, rows, src)

    def _on_stream(self) -> Any:
        return (
            torch.cuda.stream(self._stream)
            if self._stream is not None
            else contextlib.nullcontext()
        )

    def wait(self) -> None:
        """Block until every copy issued so far has finished (no-op off CUDA)."""
        if self._stream is not None:
            self._stream.synchronize()
