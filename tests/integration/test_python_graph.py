"""A graph built in Python and launched without a YAML file (issue 33 item 1): the run records
it in ``config.yml`` (the observation given as an array saved in the run), and launching the
YAML :meth:`~kestrel_core.Graph.save` writes is the same launch — bit-identical for a seed.

Two tiny deterministic launches on the session's Ray (a Gaussian estimator, max_epochs 2).
"""

from __future__ import annotations

import numpy as np
import yaml

from kestrel import launch
from kestrel_core import Graph, Product, load_config
from kestrel_core.store._buffer_file import read_buffer_file
from kestrel_core.testing import models

SECTIONS = {
    "buffer": {
        "min_samples": 64,
        "max_samples": 128,
        "validation_samples": 16,
        "simulate_count": 16,
        "simulate_interval": 0.0,
        "epochs_per_round": 1,
    },
    "sample": {"posterior": {"n": 7}},
    "deterministic": True,
    # the initial 80 simulations and one round: spent after the first epoch, so no round is
    # left racing the end of training
    "budget": {"simulations": 96},
}


def _files(run):
    """The arrays a launch leaves: the buffer, the weights, the posterior samples."""
    snapshot = read_buffer_file(str(run / "buffer" / "snapshots"))
    weights = (run / "graph" / "z" / "estimator.pt").read_bytes()
    samples = sorted((run / "samples" / "posterior").rglob("[0-9]*.npz"))
    return snapshot, weights, [p.read_bytes() for p in samples]


def test_a_python_graph_launches_as_its_yaml_does(tmp_path, no_leaked_actors):
    g = Graph(base_dir=tmp_path)
    g.add_node(
        "z",
        prior=Product([["uniform", 0.0, 1.0]] * 2),
        evidence=["x"],
        estimator=("kestrel_torch.GaussianPosterior", {"max_epochs": 2}),
    )
    g.add_node("x", (models.Noise, {"sigma": 0.1}), parents=["z"], observed=np.array([0.4, 0.6]))

    first = launch({"graph": g, **SECTIONS}, tmp_path / "a", seed=4, progress=False)
    config = g.save(tmp_path / "config.yml", **SECTIONS)
    second = launch(config, tmp_path / "b", seed=4, progress=False)

    assert first.status == second.status == "completed"
    # max_epochs 2, and one epoch more on the budget's round (taken in at the end of epoch 2):
    # every budgeted simulation is trained on (issue 31 item 4)
    assert first.epochs == second.epochs == {"z": 3}
    # the record: the observation saved in the run and named by its config.yml, which says
    # the same for both launches and loads back to the graph
    recorded = yaml.safe_load((tmp_path / "a" / "config.yml").read_text())
    assert recorded == yaml.safe_load((tmp_path / "b" / "config.yml").read_text())
    node = recorded["graph"]["x"]
    assert node["observed"] == "observations/x.npy"
    assert node["simulator"] == {"_target_": "kestrel_core.testing.models.Noise", "sigma": 0.1}
    np.testing.assert_array_equal(np.load(tmp_path / "a" / "observations" / "x.npy"), [0.4, 0.6])
    again = load_config(tmp_path / "a" / "config.yml", run_dir=tmp_path / "a")
    np.testing.assert_array_equal(again.graph.observations["x"], [0.4, 0.6])
    # bit-identical buffers, weights and posterior samples
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert a[0].arrays.keys() == b[0].arrays.keys()
    for key in a[0].arrays:
        np.testing.assert_array_equal(a[0].arrays[key], b[0].arrays[key], err_msg=key)
    np.testing.assert_array_equal(a[0].ids, b[0].ids)
    assert a[0].next_id == 96
    assert a[1] == b[1], "estimator.pt differs"
    assert a[2] and a[2] == b[2], "posterior samples differ"
