"""The embedding of example 04 (torch): log x, in float64."""

import torch
from torch import nn


class LogX(nn.Module):
    """``log x`` per component, float64 ``(B, 3)``.

    With x = exp(z) + noise, ``log x ≈ z + noise / x``: the posterior mean becomes linear in the
    features, so the estimator's linear path can reach the 6.7e-9 widths of this example. The
    computation stays in float64 (float32 would round z = 5 to about 5e-7).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x.to(torch.float64).clamp_min(torch.finfo(torch.float64).tiny))
