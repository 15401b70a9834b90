"""Truncated proposals (TSNPE) in a launch: sequential rounds for flow matching.

One deterministic toy launch (``test_launch``'s toy: z ~ U(0, 1)², x = z + noise, observed at
(0.4, 0.6)) with a ``FlowMatchingPosterior`` — which draws no tempered proposals — and
``proposal: truncated``: its resimulation rounds draw the prior restricted to the posterior's
highest-density region, rows that carry the prior's density, and the estimator's status says
what the truncation did.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

import kestrel

from .test_launch import toy

ESTIMATOR = {
    "_target_": "kestrel_torch.FlowMatchingPosterior",
    "proposal": "truncated",
    "max_epochs": 3,
    "hidden_features": [16, 16],
}


@pytest.fixture(scope="module")
def launched(tmp_path_factory, ray_session):
    tmp = tmp_path_factory.mktemp("truncated")
    cfg = toy(tmp, estimator=ESTIMATOR)
    config = tmp / "config.yml"
    config.write_text(yaml.safe_dump(cfg))
    result = kestrel.launch(
        str(config), str(tmp / "run"), seed=5, auto_sample=False, deterministic=True
    )
    assert result.status == "completed", result
    return tmp / "run"


def test_rounds_draw_the_prior_inside_the_region(launched):
    with np.load(launched / "buffer" / "snapshots" / "buffer.npz") as f:
        theta, log_prob, ids = f["z.value"], f["z.log_prob"], f["_ids"]
    # U(0, 1)²'s log density is 0: every row, the rounds' included, carries the prior's (what
    # marks a row for the plain maximum-likelihood loss), and stays in the prior's support
    np.testing.assert_array_equal(log_prob, np.zeros(len(log_prob)))
    assert np.all((theta >= 0.0) & (theta <= 1.0))
    assert np.any(ids >= 80)  # rows of the rounds, after the initial 64 + 16


def test_the_node_log_says_what_each_round_truncated(launched):
    text = (launched / "graph" / "z" / "output.log").read_text()
    lines = [line for line in text.splitlines() if "truncated proposal of round" in line]
    assert lines, text
    assert "the region holds about" in lines[0] and "ε = 0.0001" in lines[0], lines[0]
