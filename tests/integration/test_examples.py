"""Every example launched with a tiny buffer and 2 epochs: run directory and sample shapes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kestrel import launch
from kestrel_core import load_config

from .helpers import example, tiny

EXAMPLES = [
    "01_minimal",
    "02_bimodal",
    "03_composite",
    "04_gaussian",
    "05_linear_regression",
    "10_program",
]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_launches_with_a_tiny_budget(name, tmp_path, no_leaked_actors):
    config = example(name)
    run = tmp_path / "run"
    result = launch(config, run, overrides=tiny(config), seed=11, progress=False)
    cfg = load_config(config)

    assert result.status == "completed"
    assert result.epochs == {m: 2 for m in cfg.graph.latents}
    # the run directory of issue 5, item 2
    assert (run / "config.yml").is_file()
    assert load_config(run / "config.yml").graph.forward_order == cfg.graph.forward_order
    assert (run / "graph" / "driver" / "output.log").stat().st_size > 0
    assert (run / "buffer" / "snapshots").is_dir()
    for node in cfg.graph.nodes:
        assert (run / "graph" / node / "output.log").is_file()
    for node in cfg.graph.latents:
        folder = run / "graph" / node
        assert (folder / "saved.json").is_file()
        assert len(list(folder.glob("*.pt"))) == 1  # the estimator's weights
        rows = (folder / "metrics.csv").read_text().splitlines()
        assert rows[0].startswith("epoch,") and [r.split(",")[0] for r in rows[1:]] == ["1", "2"]
        assert "epoch 2" in (folder / "output.log").read_text()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "completed" and status["seed"] == 11
    assert status["simulated"] >= 64 + 16
    # posterior samples: one array per estimator node, (n, *D)
    files = sorted((run / "samples" / "posterior").glob("*/0*.npz"))
    assert [f.name for f in files] == ["000000.npz"]
    with np.load(files[0]) as data:
        assert sorted(data.files) == sorted(cfg.graph.latents)
        prior_draws = {
            m: cfg.graph[m].simulator.build().sample(1, np.random.default_rng(0))
            for m in data.files
        }
        for m in data.files:
            assert data[m].shape == (7, *prior_draws[m].shape[1:])
            assert np.isfinite(data[m]).all()
