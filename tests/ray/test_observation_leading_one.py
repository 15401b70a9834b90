"""K08 at launch, before Ray starts: the dry run settles an observation of shape ``(1, *D)``.

The launch's preflight simulates every node once; an observed node's per-sample shape ``D``
then fits its observation (``(1, *D)`` → ``D`` with a warning), the run keeps ``D`` (the
observation saved in ``RUN/observations``) and a relaunch with the same ``(1, *D)`` file is the
same run. No Ray is started here.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from kestrel.preflight._checks import preflight
from kestrel.rundir._config import run_config_changes
from kestrel.rundir._rundir import RunDir
from kestrel_core import GraphError, load_config

X = np.array([1.0, -2.0, 3.0])


def raw_config(observed) -> dict:
    """Example 01's shape: z ~ U(−5, 5)³ with a Gaussian estimator, x = z + noise observed."""
    return {
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -5, 5]] * 3,
                },
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2},
            },
            "x": {
                "simulator": {"_target_": "kestrel_core.testing.models.Noise"},
                "parents": ["z"],
                "observed": observed,
            },
        }
    }


def config(observed):
    return load_config(raw_config(observed))


@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "in-memory"])
def test_k08_observation_with_leading_one_in_launch(tmp_path, in_memory):
    np.save(tmp_path / "x_1x3.npy", X[None])
    cfg = config(X[None] if in_memory else str(tmp_path / "x_1x3.npy"))
    assert cfg.graph.observations["x"].shape == (1, 3)
    outputs: dict = {}
    with pytest.warns(UserWarning, match=r"node 'x': observation has shape \(1, 3\).*\(3,\)"):
        preflight(cfg, dry_run=True, outputs=outputs)
    assert cfg.graph.observations["x"].shape == (3,)
    run = RunDir(tmp_path / "run")
    run.makedirs()
    run.write_config(cfg)
    saved = [f for f in os.listdir(run.root + "/observations")]
    assert saved == ["x.npy"] and np.load(run.root + "/observations/x.npy").shape == (3,)
    recorded = run.load_config((), check_targets=())
    np.testing.assert_array_equal(recorded.graph.observations["x"], X)
    again = config(X[None] if in_memory else str(tmp_path / "x_1x3.npy"))
    assert run_config_changes(recorded, again, run.root) == []  # a relaunch resumes
    other = config((X + 1)[None])
    assert [c.key for c in run_config_changes(recorded, other, run.root)] == ["graph.x.observed"]


def test_k08_several_observations_are_refused_before_ray(tmp_path):
    cfg = config(np.tile(X, (5, 1)))
    with pytest.raises(GraphError, match=r"node 'x'.*\(3,\) per sample.*\(5, 3\)"):
        preflight(cfg, dry_run=True)


def test_k17_embedding_forward_fails_in_preflight(tmp_path):
    from kestrel_core import ConfigError

    raw = raw_config(X.tolist())
    raw["graph"]["z"]["estimator"]["embedding"] = {
        "_target_": "torch.nn.Linear",
        "in_features": 5,  # x has 3
        "out_features": 4,
    }
    cfg = load_config(raw)
    with pytest.raises(ConfigError, match=r"graph\.z\.estimator\.embedding: .*mat1"):
        preflight(cfg, dry_run=True)
