"""Write data/obs.npz for example 01 (seeded): x (3,), z_true (3,)."""

from pathlib import Path

import numpy as np

SIGMA = 0.1


def main() -> None:
    rng = np.random.default_rng(1)
    z_true = np.array([10.9, -13.1, 0.8])
    x = z_true + SIGMA * rng.standard_normal(3)
    out = Path(__file__).with_name("obs.npz")
    np.savez(out, x=x, z_true=z_true)
    print(f"wrote {out}: x={x}")


if __name__ == "__main__":
    main()
