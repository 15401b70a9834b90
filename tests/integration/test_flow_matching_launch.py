"""A tiny launch with FlowMatchingPosterior (issue 31 item 1): it trains inside the estimator
actor like the other estimators and writes posterior samples."""

from __future__ import annotations

import numpy as np

from kestrel import launch

from .helpers import TINY

MODELS = "kestrel_core.testing.models"


def test_flow_matching_posterior_in_a_launch(tmp_path, no_leaked_actors):
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([0.4, 0.6]))
    estimator = {"_target_": "kestrel_torch.FlowMatchingPosterior", "max_epochs": 2, "ode_steps": 8}
    cfg = {
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": estimator,
            },
            "x": {
                "simulator": {"_target_": f"{MODELS}.Noise"},
                "parents": ["z"],
                "observed": str(obs),
            },
        },
    }
    run = tmp_path / "run"
    result = launch(cfg, run, overrides=TINY, seed=5, progress=False)

    assert result.status == "completed"
    assert result.epochs == {"z": 2}
    files = sorted((run / "samples" / "posterior").glob("*/0*.npz"))
    assert [f.name for f in files] == ["000000.npz"]
    with np.load(files[0]) as data:
        values = data["z"]
    assert values.shape == (7, 2) and np.isfinite(values).all()
    assert np.all((values >= 0.0) & (values <= 1.0))  # the prior's support
