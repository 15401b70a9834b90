"""A small CNN embedding for example 03 (runs on a 2-core CPU)."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    """(B, 32, 32) Poisson counts → (B, out_features) features.

    Counts are variance-stabilised with sqrt before the convolutions.
    """

    def __init__(self, out_features: int = 32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 8 * 8, 64),
            nn.ReLU(),
            nn.Linear(64, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.sqrt(x.float().clamp_min(0.0)).unsqueeze(1)
        return self.net(x)
