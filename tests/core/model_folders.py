"""A user's model folder, as tests of run-folder safety write it (K30, K32): ``config.yml``
(with the user's comment and a relative observation), the simulator module and
``data/obs.npy``; and a byte snapshot of a folder, to show nothing in it changed."""

from __future__ import annotations

import os

import numpy as np

#: the simulator module: x = z + offset (+ extra, to tell two copies of the code apart)
MODEL = """\
class Shift:
    def __init__(self, offset=0.0):
        self.offset = float(offset)

    def simulate_batch(self, n, z):
        return z + self.offset + {extra}
"""

#: the user's config; ``{estimator}`` is an extra line under node z (kestrel-core's tests
#: load configs without torch, so they leave it empty)
CONFIG = """\
# the user's config: comments and a relative observation stay as they are
buffer: {{min_samples: 16, max_samples: 32, validation_samples: 4}}
graph:
  z:
    simulator: {{_target_: kestrel_core.Product, priors: [[uniform, 0.0, 1.0], [uniform, 0.0, 1.0]]}}
    evidence: [x]
{estimator}
  x:
    simulator: {{_target_: {module}.Shift}}
    parents: [z]
    observed: "data/obs.npy"
sample:
  prior: {{n: 5}}
"""

#: the estimator line a launch needs
GAUSSIAN = "    estimator: {_target_: kestrel_torch.GaussianPosterior, max_epochs: 1}"


def write_model(path, extra: float = 0.0) -> None:
    """The simulator module at ``path``, adding ``extra`` to every output."""
    with open(path, "w") as fh:
        fh.write(MODEL.format(extra=extra))


def model_folder(folder, module: str, extra: float = 0.0, estimator: str = ""):
    """Write a model folder (``config.yml``, ``<module>.py``, ``data/obs.npy``) and return it."""
    (folder / "data").mkdir(parents=True)
    np.save(folder / "data" / "obs.npy", np.array([0.4, 0.6]))
    write_model(folder / f"{module}.py", extra)
    text = CONFIG.format(module=module, estimator=estimator).replace("\n\n", "\n")
    (folder / "config.yml").write_text(text)
    return folder


def files(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes)."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out
