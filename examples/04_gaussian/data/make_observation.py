"""Write data/obs.npz for example 04: the Asimov observation x_o = exp([-5, 0, 5])."""

from pathlib import Path

import numpy as np

SIGMA = 1e-6


def main() -> None:
    z_true = np.array([-5.0, 0.0, 5.0])
    x = np.exp(z_true)
    out = Path(__file__).with_name("obs.npz")
    np.savez(
        out,
        x=x,
        z_true=z_true,
        posterior_mean=np.log(x),
        posterior_std=SIGMA / x,
    )
    print(f"wrote {out}: x={x}")


if __name__ == "__main__":
    main()
