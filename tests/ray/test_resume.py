"""What a resumed launch keeps (K31): the best weights, the seed's streams, the epoch totals.

The decisions of :mod:`kestrel.controller._resume` on a run directory, with a stand-in for the
deployed graph: no actor starts here.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from kestrel.controller._resume import LAUNCH_KEY, Resume, add_epochs, launch_seed
from kestrel.rundir._rundir import RunDir
from kestrel_core import ConfigError, load_config

OLD, NEW = b"old weights", b"new weights"


class Session:
    """The part of a RunSession that Resume uses; ``save_weights`` writes ``NEW``."""

    def __init__(self, root, nodes=("z",)):
        self.run = RunDir(root)
        self.config = SimpleNamespace(graph=SimpleNamespace(latents=list(nodes)))
        self.saved: dict[str, int] = {}

    def save_weights(self, dg, epochs):
        for node, epoch in epochs.items():
            folder = self.run.node_dir(node)
            with open(f"{folder}/estimator.pt", "wb") as fh:
                fh.write(NEW)
            self.run.mark_saved(node, {"epoch": epoch})
            self.saved[node] = epoch
        return {node: self.run.node_dir(node) for node in epochs}


def saved_run(tmp_path, epoch=12):
    session = Session(tmp_path)
    folder = tmp_path / "graph" / "z"
    folder.mkdir(parents=True)
    (folder / "estimator.pt").write_bytes(OLD)
    session.run.mark_saved("z", {"epoch": epoch})
    return session, folder


def status(epoch, best_epoch, loss=-1.0):
    return {"z": {"estimator": {"epoch": epoch, "best_epoch": best_epoch, "best_val_loss": loss}}}


def test_k31_a_better_model_replaces_the_weights_and_the_old_ones_are_kept(tmp_path, caplog):
    session, folder = saved_run(tmp_path)
    resume = Resume(session, logging.getLogger("test"))
    resume.loaded = {"z": status(12, 10)["z"]["estimator"]}
    result: dict[str, int] = {}
    with caplog.at_level(logging.INFO):
        resume.save_weights(None, status(15, 14, -2.0), result)
    assert result == {"z": 15} and session.saved == {"z": 15}
    assert (folder / "estimator.pt").read_bytes() == NEW
    assert (folder / "previous" / "estimator.pt").read_bytes() == OLD
    assert '"epoch": 12' in (folder / "previous" / "saved.json").read_text()
    assert "new best model" in caplog.text


def test_k31_without_a_better_epoch_the_weights_stay_byte_for_byte(tmp_path, caplog):
    session, folder = saved_run(tmp_path)
    resume = Resume(session, logging.getLogger("test"))
    resume.loaded = {"z": status(12, 10)["z"]["estimator"]}
    result: dict[str, int] = {}
    with caplog.at_level(logging.INFO):
        resume.save_weights(None, status(15, 10), result)
    assert result == {"z": 15} and session.saved == {}
    assert (folder / "estimator.pt").read_bytes() == OLD
    assert not (folder / "previous").exists()
    assert "weights kept" in caplog.text


def test_a_fresh_node_is_saved_as_before(tmp_path):
    session = Session(tmp_path)
    (tmp_path / "graph" / "z").mkdir(parents=True)
    result: dict[str, int] = {}
    Resume(session, logging.getLogger("test")).save_weights(None, status(2, 2), result)
    assert session.saved == {"z": 2}
    assert not (tmp_path / "graph" / "z" / "previous").exists()


def test_k31_each_launch_has_its_own_stream_of_the_one_seed():
    assert launch_seed(21, 1) == 21 and launch_seed(21, None) == 21  # a first launch: as ever
    later = [launch_seed(21, k) for k in (2, 3)]
    assert [s.spawn_key for s in later] == [(LAUNCH_KEY, 1), (LAUNCH_KEY, 2)]
    assert all(s.entropy == 21 for s in later)
    first = np.random.SeedSequence(21)
    states = [first.generate_state(4).tolist()]
    states += [child.generate_state(4).tolist() for child in first.spawn(8)]  # node streams
    states += [s.generate_state(4).tolist() for s in later]
    assert len({tuple(s) for s in states}) == len(states)  # all distinct
    again = launch_seed(21, 3)
    assert again.generate_state(4).tolist() == later[1].generate_state(4).tolist()


def test_k31_epochs_adds_to_the_saved_epoch_count(tmp_path):
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([0.5]))
    config = load_config(
        {
            "graph": {
                "z": {
                    "simulator": {
                        "_target_": "kestrel_core.Product",
                        "priors": [["uniform", 0, 1]],
                    },
                    "evidence": ["x"],
                    "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 9},
                },
                "x": {
                    "simulator": {"_target_": "kestrel_core.testing.models.Noise"},
                    "parents": ["z"],
                    "observed": str(obs),
                },
            }
        }
    )
    run = RunDir(tmp_path)
    assert add_epochs(config, run, 4) == {"z": 4}  # no saved weights: 4 in all
    (tmp_path / "graph" / "z").mkdir(parents=True)
    run.mark_saved("z", {"epoch": 12})
    assert add_epochs(config, run, 4) == {"z": 16}
    assert config.graph["z"].estimator.kwargs["max_epochs"] == 16


def test_epochs_needs_an_estimator_config_not_an_object(tmp_path):
    node = SimpleNamespace(estimator=SimpleNamespace(is_live=True, kwargs={}))
    graph = type("Graph", (), {"latents": ["z"], "__getitem__": lambda self, name: node})()
    with pytest.raises(ConfigError, match="--epochs: node 'z'"):
        add_epochs(SimpleNamespace(graph=graph), RunDir(tmp_path), 2)
