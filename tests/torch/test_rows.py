"""Which rows are finite: the sum's shortcut decides exactly as ``isfinite(t).all(1)``."""

from __future__ import annotations

import torch

from kestrel_torch.data._rows import finite_rows


def test_finite_rows_agrees_with_isfinite_including_overflowing_sums() -> None:
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32, torch.float16, torch.complex64):
        t = torch.randn(64, 3, 5, generator=gen).to(dtype)
        t[1, 0, 0] = float("nan")
        t[2, 2, 4] = float("inf")
        t[3, 1, 1], t[3, 1, 2] = float("inf"), float("-inf")  # the sum is NaN
        big = torch.finfo(t.real.dtype).max
        t[4] = big  # every value finite, the row's sum overflows: still a finite row
        t[5, 0, 0], t[5, 0, 1] = big, -big
        expected = torch.isfinite(t.reshape(64, -1)).all(dim=1)
        got = finite_rows(t)
        assert got.dtype == torch.bool and got.shape == (64,)
        assert torch.equal(got, expected), dtype
        assert not got[1:4].any() and got[4] and got[5] and got[0]
