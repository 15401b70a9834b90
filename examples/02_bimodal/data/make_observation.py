"""Write data/obs.npz for example 02 (seeded): x (4,), z_true (4,), sign (4,)."""

from pathlib import Path

import numpy as np

SHIFT, SIGMA = 0.3, 0.05


def main() -> None:
    rng = np.random.default_rng(2)
    z_true = np.array([0.2, -0.3, 0.5, -0.1])
    sign = np.array([1.0, 1.0, -1.0, 1.0])  # both modes x_i ± 0.3 lie inside the prior
    x = z_true + SHIFT * sign + SIGMA * rng.standard_normal(4)
    out = Path(__file__).with_name("obs.npz")
    np.savez(out, x=x, z_true=z_true, sign=sign)
    print(f"wrote {out}: x={x}")


if __name__ == "__main__":
    main()
