"""Example 03: two latent blocks feeding one Poisson image.

z1 ~ U(-0.6, 0.6)^2: position (cx, cy) of a blob on a 32×32 image spanning [-1, 1]^2;
z2 ~ [U(20, 60), U(0.1, 0.3)]: the blob's peak brightness and width;
img = background + A·exp(-|r - c|^2 / (2w^2))   (expected counts, float64 (n, 32, 32));
x ~ Poisson(img).
Pure numpy; the CNN embedding lives in ``embedding.py`` (torch) so ``kestrel simulate``
works with kestrel-core alone.
"""

import numpy as np

SIZE = 32
BACKGROUND = 5.0


def _grid():
    t = (np.arange(SIZE) + 0.5) / SIZE * 2.0 - 1.0
    return np.meshgrid(t, t, indexing="xy")


class Blob:
    """Expected counts of one Gaussian blob on a flat background."""

    def __init__(self, background: float = BACKGROUND):
        self.background = float(background)
        self._gx, self._gy = _grid()

    def simulate_batch(self, n, z1, z2):
        cx, cy = z1[:, 0, None, None], z1[:, 1, None, None]
        amp, width = z2[:, 0, None, None], z2[:, 1, None, None]
        r2 = (self._gx - cx) ** 2 + (self._gy - cy) ** 2
        return self.background + amp * np.exp(-r2 / (2.0 * width**2))


class Poisson:
    """x ~ Poisson(img), returned as float64 counts."""

    def simulate_batch(self, n, img, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return rng.poisson(img).astype(np.float64)
