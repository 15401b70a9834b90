"""True resume (K31): the buffer restored, epochs and seed continued, the best weights kept."""

from __future__ import annotations

import json

import numpy as np

from kestrel import launch
from kestrel_core import Status
from kestrel_core.store import BUFFER_FILE, read_buffer_file

from .test_launch import toy


def buffer_of(run) -> object:
    snapshot = read_buffer_file(run / "buffer" / "snapshots")
    assert snapshot is not None and snapshot.source.endswith(BUFFER_FILE)
    return snapshot


def test_k31_resume_restores_the_buffer_continues_and_keeps_the_better_weights(
    tmp_path, no_leaked_actors
):
    run = tmp_path / "run"
    estimator = {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 12, "batch_size": 16}
    first = launch(toy(tmp_path, estimator=estimator), run, seed=21, progress=False)
    assert first.status == "completed" and first.epochs == {"z": 12}
    before = buffer_of(run)  # saved at the end of the launch
    validation = before.ids_with(Status.VALIDATION)
    assert len(validation) == 16 and before.n >= 64 + 16
    weights = run / "graph" / "z" / "estimator.pt"
    saved = weights.read_bytes()

    # resumed with 3 epochs more, at a learning rate that can only make the model worse, and
    # no resimulation round (the validation set then stays the restored one to the end)
    second = launch(
        None,
        run,
        # (not deterministic: a deterministic schedule would wait for the rounds)
        overrides=[
            "graph.z.estimator.lr=3.0",
            "buffer.simulate_interval=1000",
            "deterministic=false",
        ],
        mode="resume",  # --resume: a buffer key changes, not only the estimator's
        epochs=3,
        seed=99,
        progress=False,
    )
    assert second.status == "completed" and second.resumed == ["z"]
    assert second.epochs == {"z": 15}  # the epoch counter continues: 12 + 3
    assert second.simulated == 0  # no simulation from the prior: the buffer was restored
    assert second.seed == first.seed == 21  # the run keeps its first seed
    log = (run / "graph" / "driver" / "output.log").read_text()
    assert "buffer restored from" in log and "initial simulation: 0 samples" in log
    status = json.loads((run / "status.json").read_text())
    assert status["restored"]["validation"] == 16 and status["restored"]["rows"] == before.n
    history = json.loads((run / "run.json").read_text())["launches"]
    assert [entry["seed"] for entry in history] == [21, 21]
    rows = (run / "graph" / "z" / "metrics.csv").read_text().splitlines()[1:]
    assert [int(r.split(",")[0]) for r in rows] == list(range(1, 16))

    # the worse continuation did not replace the saved weights
    assert "weights kept" in log
    assert weights.read_bytes() == saved
    assert not (run / "graph" / "z" / "previous").exists()
    # the restored rows kept their ids and statuses: the same validation set
    after = buffer_of(run)
    np.testing.assert_array_equal(after.ids_with(Status.VALIDATION), validation)
    np.testing.assert_array_equal(after.ids, before.ids)
    for key, value in before.arrays.items():
        np.testing.assert_array_equal(after.arrays[key], value)
