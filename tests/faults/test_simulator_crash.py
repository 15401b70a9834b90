"""A simulator actor's process killed in the middle of a call (issue 11, item 1).

Ray restarts the actor (``max_restarts``) and retries the call with the same seeds; the driver
owns every block, so nothing stored before the crash is lost or changed, and nothing is
stored twice. The launch records each restart in the driver log and ``status.json``.
"""

from __future__ import annotations

import numpy as np
import pytest

from kestrel import launch
from kestrel_core import TRAINABLE, Graph, Spec, sample_forward
from kestrel_core.testing.models import KilledAt, batches
from kestrel_ray import RayBufferView
from kestrel_ray.store._snapshot import snapshot_store

from .faultkit import MODELS, buffer_file, contiguous, driver_log, paired, status, toy

pytestmark = pytest.mark.faults


def crash_graph(folder, kill_at) -> Graph:
    graph = Graph().add_node("z", Spec("kestrel_core.Product", {"priors": [["uniform", 0, 1]] * 2}))
    graph.add_node(
        "x",
        Spec(KilledAt, {"folder": str(folder), "kill_at": list(kill_at)}),
        parents=["z"],
        sample_chunk_size=16,
    )
    return graph


def test_a_simulator_killed_mid_call_loses_and_changes_no_stored_sample(deployed, tmp_path):
    folder = tmp_path / "batches"
    # 5 chunks per call: the process dies at the start of the 3rd chunk of the first call
    # (nothing stored yet) and of the 2nd chunk of the second (80 samples stored)
    dg = deployed(crash_graph(folder, kill_at=[3, 10]), seed=1)
    first = dg.sample(80)
    dg.append(first)
    before = snapshot_store(dg.store)
    second = dg.sample(80)
    dg.append(second)
    after = snapshot_store(dg.store)

    assert batches(folder) == 3 + 5 + 2 + 5  # each killed call ran again from its first chunk
    assert contiguous(after.ids) and len(after.ids) == 160 and after.next_id == 160
    for key, values in before.arrays.items():  # the rows stored before the crash, unchanged
        np.testing.assert_array_equal(after.arrays[key][:80], values)
    assert paired(after.arrays["z.value"], after.arrays["x.value"])
    # the retried call drew exactly what an uninterrupted one draws (here: in this process)
    expected = sample_forward(crash_graph(tmp_path / "clean", []), 80, seed=1, chunk_size=16)
    for key in ("z.value", "x.value"):
        np.testing.assert_array_equal(after.arrays[key][:80], expected[key])
    view = RayBufferView(dg.store, timeout=30)
    assert view.fetch(TRAINABLE, ["x.value"]).arrays["x.value"].shape == (160, 2)


def test_a_launch_survives_simulator_crashes_and_records_them(tmp_path, no_leaked_actors):
    folder = tmp_path / "batches"
    # the initial simulation is 5 pieces of 16 (a round's size), one call each, queued at once:
    # killed in the 3rd (batch 3; its retry and the two queued pieces are batches 4-6); the
    # resimulation rounds are one chunk each (batches 7, …): killed in the 2nd (batch 8)
    x = {"_target_": f"{MODELS}.KilledAt", "folder": str(folder), "kill_at": [3, 8]}
    # rounds follow the epochs (one per epoch, training waits for each: deterministic, so the
    # 2nd round is drawn however fast the epochs run): enough epochs for the rounds that crash
    cfg = toy(tmp_path, x, epochs=30, max_samples=100_000)
    run = tmp_path / "run"
    result = launch(cfg, run, seed=2, progress=False, deterministic=True)

    assert result.status == "completed" and batches(folder) >= 9
    assert result.restarts == {"x": 2}
    st = status(run)
    assert st["status"] == "completed" and st["restarts"] == {"x": 2}
    log = driver_log(run)
    assert "node 'x': actor (replica 0) restarted after a crash (restart 1 of at most 3)" in log
    assert "(restart 2 of at most 3)" in log
    saved = buffer_file(run)
    ids = saved["_ids"]
    assert contiguous(ids) and int(saved["_next_id"]) == len(ids) == result.simulated
    assert paired(saved["z.value"], saved["x.value"])
