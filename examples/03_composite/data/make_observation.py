"""Write data/obs.npz for example 03 (seeded): x (32, 32), z1_true (2,), z2_true (2,)."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from model import Blob, Poisson  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(3)
    z1 = np.array([[0.25, -0.3]])
    z2 = np.array([[40.0, 0.18]])
    img = Blob().simulate_batch(1, z1, z2)
    x = Poisson().simulate_batch(1, img, rng=rng)[0]
    out = Path(__file__).with_name("obs.npz")
    np.savez(out, x=x, z1_true=z1[0], z2_true=z2[0])
    print(f"wrote {out}: x sum={x.sum():.0f}")


if __name__ == "__main__":
    main()
