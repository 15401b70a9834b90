"""Expensive simulators: 20 ms of CPU per sample on 2 replicas while a flow trains.

Group ``simulators`` (measured, not gated): two launches (``kestrel.launch``, the session's
Ray) of one graph — θ ~ U(−1, 1)², x = θ + 0.1·ε from :class:`kestrel_bench.BusySimulator`
with ``num_actors: 2``, a FlowPosterior on θ trained for a fixed number of epochs:

* Kestrel — resimulating while training: x costs 20 ms of CPU a sample; rounds of 32 proposal
  draws follow each other as fast as the driver starts them (``epochs_per_round: 0``,
  ``simulate_interval: 0``), each split over the two replicas;
* baseline "training alone" — the same launch with a free simulator (0 ms) and no rounds (the
  buffer full from the initial simulation, ``simulate_when_full: false``).

The timed value is seconds per training step (the estimator's own steps/s in
``RUN/profile.json``), so the ratio baseline / Kestrel is the training throughput kept while
the simulators run. ``extra_info`` has each replica's busy share (its simulator's seconds over
the seconds simulations could run), the rounds drawn and the resource split. Issue 12's targets
(busy ≥ 0.9 and ≥ 0.85 of training alone) need a core per replica and one for training: on the
2-core CI machine three busy processes share two cores, so this group is reported, not gated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kestrel_bench import BASELINE, KESTREL, label, pedantic_inner

MS_PER_SAMPLE = 20.0
REPLICAS = 2
EPOCHS = 40
BUFFER = {"min_samples": 512, "max_samples": 512, "validation_samples": 64}


def config(ms: float, resimulate: bool) -> dict[str, Any]:
    """The launch's config: a busy simulator that resimulates, or a free one that does not."""
    buffer: dict[str, Any] = dict(BUFFER, epochs_per_round=0, simulate_interval=0.0)
    buffer.update(simulate_count=32, simulate_when_full=resimulate)
    return {
        "buffer": buffer,
        "graph": {
            "theta": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -1.0, 1.0], ["uniform", -1.0, 1.0]],
                },
                "evidence": ["x"],
                "estimator": {
                    "_target_": "kestrel_torch.FlowPosterior",
                    "max_epochs": EPOCHS,
                    "early_stop_patience": EPOCHS,
                },
            },
            "x": {
                "simulator": {"_target_": "kestrel_bench.BusySimulator", "ms": ms},
                "parents": ["theta"],
                "num_actors": REPLICAS,
                "observed": "obs.npy",
            },
        },
        "sample": {"posterior": {"n": 100}},
    }


def launch_profile(tmp: Path, name: str, ms: float, resimulate: bool) -> dict[str, Any]:
    """Launch the config into ``tmp/name``; its ``profile.json``."""
    import numpy as np

    from kestrel import launch

    folder = tmp / name
    folder.mkdir()
    np.save(folder / "obs.npy", np.array([0.2, -0.3]))
    cfg = config(ms, resimulate)
    cfg["graph"]["x"]["observed"] = str(folder / "obs.npy")
    result = launch(cfg, folder / "run", seed=1, progress=False)
    assert result.status == "completed", result.status
    return json.loads((folder / "run" / "profile.json").read_text())


@pytest.mark.parametrize("role", [BASELINE, KESTREL])
def test_training_while_expensive_simulators_run(
    benchmark, ray_session, tmp_path: Path, role: str
) -> None:
    resimulate = role == KESTREL
    ms = MS_PER_SAMPLE if resimulate else 0.0

    def run() -> tuple[float, dict[str, Any]]:
        profile = launch_profile(tmp_path, f"{role}-{len(os.listdir(tmp_path))}", ms, resimulate)
        steps_per_s = float(profile["estimators"]["theta"]["steps_per_s"])
        return 1.0 / steps_per_s, profile

    profile = pedantic_inner(benchmark, run, rounds=1, warmup_rounds=0, where="estimator steps")
    replicas = profile["actors"]["x"]
    busy = [float(r["busy_share"]) for r in replicas]
    info: dict[str, Any] = {"baseline": "training alone"} if role == BASELINE else {}
    label(
        benchmark,
        "simulators",
        role,
        BUFFER["max_samples"],
        **info,
        steps_per_s=float(profile["estimators"]["theta"]["steps_per_s"]),
        busy_share=busy,
        simulated=[int(r["samples"]) for r in replicas],
        cpus=os.cpu_count(),
        split=f"{REPLICAS} simulator replicas (num_cpus 0) + 1 estimator on {os.cpu_count()} cores",
        ms_per_sample=ms,
    )
    assert len(replicas) == REPLICAS
    if resimulate:  # the simulators did run while training went on
        assert all(b > 0 for b in busy), busy
