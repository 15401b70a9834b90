"""Labels the gate reads, and the small device helpers every benchmark file uses."""

from __future__ import annotations

from typing import Any

__all__ = ["label", "rounds", "skip_without_cuda", "sync_device", "KESTREL", "BASELINE", "BIG"]

KESTREL = "kestrel"
BASELINE = "baseline"
#: above this N, the slow baselines get one or a few rounds
BIG = 1024


def rounds(n: int, small: int, big: int) -> int:
    """``small`` rounds up to N = :data:`BIG`, ``big`` (fewer) above."""
    return big if n > BIG else small


def label(
    benchmark: Any, group: str, role: str, n: int, *, device: str = "cpu", **info: Any
) -> None:
    """Name a benchmark's group and fill its ``extra_info`` for :mod:`kestrel_bench.gate`.

    Args:
        benchmark: the pytest-benchmark fixture.
        group: ``resolve``, ``store``, ``fetch``, ``apply_fetch``, ``sync``, ``training``, … .
        role: :data:`KESTREL` or :data:`BASELINE`.
        n: N, the number of samples.
        device: ``"cpu"`` or ``"cuda"``; non-CPU groups are named ``group[device]``.
        **info: more ``extra_info`` (a baseline names itself with ``baseline="…"``).

    Raises:
        ValueError: an unknown role.
    """
    import torch

    if role not in (KESTREL, BASELINE):
        raise ValueError(f"label(role={role!r}): expected {KESTREL!r} or {BASELINE!r}")
    benchmark.group = group if device == "cpu" else f"{group}[{device}]"
    benchmark.extra_info.update(
        group=group,
        role=role,
        n=int(n),
        device=device,
        torch_threads=torch.get_num_threads(),
        **info,
    )
    if device == "cuda":
        benchmark.extra_info["device_name"] = torch.cuda.get_device_name()


def skip_without_cuda(device: str) -> None:
    """Skip a CUDA variant where there is no CUDA device (the CPU variants always run)."""
    import pytest
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA variant: no CUDA device on this machine")


def sync_device(device: str) -> None:
    """Wait for queued device work so a timed region includes it (no-op on the CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
