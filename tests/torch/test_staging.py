"""Host → device staging (K20): owned copies on CPU; pinned ring guarded by events on CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kestrel_torch.data._staging import HostToDevice, StagingRing


class FakeEvent:
    """Stands in for a CUDA event: 'completes' only when synchronize() is called."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name, self.done = log, name, False

    def synchronize(self) -> None:
        self.log.append(f"wait {self.name}")
        self.done = True


def test_ring_waits_for_a_buffers_copy_before_reuse():
    log: list[str] = []
    ring = StagingRing(2, pin=False)
    events = []
    for i in range(5):
        slot = ring.acquire(64)
        for previous in events:
            if previous[0] is slot:  # handed out again: its last copy must have completed
                assert previous[1].done, f"slot reused while copy {previous[1].name} in flight"
        log.append(f"fill {i}")
        slot.event = FakeEvent(log, str(i))
        events.append((slot, slot.event))
    assert log == ["fill 0", "fill 1", "wait 0", "fill 2", "wait 1", "fill 3", "wait 2", "fill 4"]


def test_ring_grows_buffers_geometrically():
    ring = StagingRing(1, pin=False)
    first = ring.acquire(100).buffer.numel()
    assert first == 100
    assert ring.acquire(50).buffer.numel() == 100
    assert ring.acquire(150).buffer.numel() == 200
    with pytest.raises(ValueError, match="at least 1 slot"):
        StagingRing(0)


def test_cpu_copy_is_owned_and_cast():
    array = np.arange(12, dtype=np.float64).reshape(3, 4)
    array.flags.writeable = False
    copier = HostToDevice("cpu")
    out = copier.copy(array, torch.float32)
    assert out.dtype == torch.float32 and out.shape == (3, 4)
    out.add_(1.0)
    np.testing.assert_array_equal(array, np.arange(12).reshape(3, 4))
    strided = np.arange(20.0).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(copier.copy(strided, torch.float64).numpy(), strided)
    np.testing.assert_array_equal(copier.copy(strided, torch.bfloat16).float().numpy(), strided)
    copier.wait()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_k20_staging_buffer_reused_only_after_its_copy():
    copier = HostToDevice("cuda", slots=1)  # one buffer: every copy refills it right away
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(1000):
        host = rng.standard_normal((128, 1024))  # 1 MiB: long enough for a race to show
        pairs.append((host, copier.copy(host, torch.float64)))
    copier.wait()
    for host, dev in pairs:
        np.testing.assert_array_equal(dev.cpu().numpy(), host)
    assert copier._ring._slots[0].buffer.is_pinned()
