"""Memory pressure (issue 11 item 3): 1 MiB samples through a 200 MiB object store, and a buffer
that cannot fit refused at start, naming the sizes."""

from __future__ import annotations

import json
import logging
import sys
from types import SimpleNamespace

import pytest

from kestrel import launch
from kestrel.preflight._capacity import (
    bytes_per_sample,
    check_capacity,
    rounds_in_flight,
    size_text,
)
from kestrel_core import ConfigError
from tests.integration.helpers import REPO, kestrel_env

from .pressure import ROUNDS, STORE_BYTES, pressure_config

pytestmark = pytest.mark.faults

MiB = 2**20


def buffer(max_samples=64, min_samples=32, validation_samples=16, simulate_count=64):
    return SimpleNamespace(
        max_samples=max_samples,
        min_samples=min_samples,
        validation_samples=validation_samples,
        simulate_count=simulate_count,
        storage="memory",  # auto would train a buffer that does not fit from disk
    )


def test_bytes_per_sample_are_a_nodes_fields_per_row():
    import numpy as np

    outputs = {
        "z": {"value": np.zeros((2, 2)), "log_prob": np.zeros(2)},
        "x": {"value": np.zeros((2, 2**17), np.float32)},
    }
    assert bytes_per_sample(outputs) == {"z": 24, "x": 2**19}


def test_a_buffer_that_fits_is_logged_and_a_tight_one_warned(caplog):
    log = logging.getLogger("test-capacity")
    with caplog.at_level(logging.INFO, logger="test-capacity"):
        need = check_capacity(buffer(simulate_count=32), {"x": MiB, "z": 24}, 200 * MiB, log=log)
        assert need == 80 * (MiB + 24)
        assert "80 samples × 1 MiB = 80 MiB of the 200 MiB object store (40 %)" in caplog.text
        assert "WARNING" not in caplog.text  # 80 + 2 rounds of 32: 72 % of the store
        check_capacity(buffer(), {"x": MiB}, 200 * MiB, log=log)  # 80 + 2 × 64: 104 %
    assert "may take 208 MiB (104 %) of the 200 MiB" in caplog.records[-1].getMessage()
    assert "spills to disk" in caplog.records[-1].getMessage()


def test_a_second_round_in_flight_only_where_its_blocks_fit_the_store():
    """Two rounds in flight (pipelined resimulation) need the buffer and three rounds within
    90 % of the store; else one, as before pipelining: a second round's blocks would spill."""
    assert rounds_in_flight(buffer(simulate_count=33), {"x": MiB}, 200 * MiB) == 2  # 80 + 99
    assert rounds_in_flight(buffer(simulate_count=34), {"x": MiB}, 200 * MiB) == 1  # 80 + 102
    assert rounds_in_flight(buffer(), {"x": MiB}, 200 * MiB) == 1  # the pressure run below
    assert rounds_in_flight(buffer(), {"x": MiB}, None) == 2  # unknown store: no limit
    assert rounds_in_flight(buffer(), {}, 200 * MiB) == 2


def test_a_buffer_that_cannot_fit_names_the_sizes():
    with pytest.raises(ConfigError) as info:
        check_capacity(buffer(max_samples=256), {"x": MiB}, STORE_BYTES)
    text = str(info.value)
    assert "max_samples 256 + validation_samples 16 samples × 1 MiB per sample = 272 MiB" in text
    assert "Ray's object store holds 200 MiB" in text
    assert "at most 184" in text and "ray.object_store_memory" in text
    # min_samples above max_samples: the store keeps min_samples
    with pytest.raises(ConfigError, match=r"max_samples 8 \(min_samples 300\)"):
        check_capacity(buffer(max_samples=8, min_samples=300), {"x": MiB}, STORE_BYTES)
    assert check_capacity(buffer(), {"x": MiB}, None) == 80 * MiB  # capacity unknown: no check
    assert size_text(512) == "512 B" and size_text(1.5 * 2**40) == "1.5 TiB"


def test_a_launch_whose_buffer_cannot_fit_fails_before_any_actor_starts(tmp_path, no_leaked_actors):
    """On the session's Ray (its store is GiBs): a million 1 MiB samples cannot fit."""
    cfg = pressure_config(tmp_path, max_samples=1_000_000)
    del cfg["ray"]  # the Ray already running in this process is used as it is
    cfg["buffer"]["storage"] = "memory"  # auto would train it from disk (if the disk held it)
    with pytest.raises(ConfigError) as info:
        launch(cfg, tmp_path / "run", seed=1, progress=False)
    text = str(info.value)
    assert "max_samples 1000000 + validation_samples 16 samples × 1 MiB per sample" in text
    assert "= 977 GiB; Ray's object store holds" in text
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "failed" and "cannot fit" in status["reason"]
    assert status["placement"] == {}  # no actor was deployed


def test_1_mib_samples_pass_through_a_200_mib_store(tmp_path):
    """10 rounds of 64 samples of 1 MiB (640 MiB) through a 200 MiB store, in a process of its
    own: no store-full error; the store never above its size; what Ray spills (the buffer's
    blocks and a round in flight may take 208 MiB: the launch warns) is bounded."""
    import subprocess

    out = tmp_path / "pressure.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.faults.pressure", "--run-dir", str(tmp_path)]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env=kestrel_env(),
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["status"] == "interrupted"  # stopped after the rounds, saved and sampled
    assert seen["rounds"] >= ROUNDS
    assert 0 < seen["peak_store_bytes"] <= STORE_BYTES
    # bounded: Ray spills a few blocks in the first rounds, then nothing (30 rounds measured:
    # 128 or 256 MiB, all by round 7; RELIABILITY.md); a block per round would be 640 MiB.
    # While the rounds run: at most five blocks, each a little over 64 MiB with its object's
    # metadata (a clean-clone CI run on 2026-12-02 spilled five: 320 MiB + 1295 B). The stop
    # after them (the buffer saved, the posterior sampled) may spill a block or two more
    # (2026-12-03: 256 MiB by the last round, 384 MiB in all; a clean-clone CI run 448 MiB in
    # all), still below a block per round.
    by_round = {int(k): v for k, v in seen["spilled_by_round"].items()}
    assert by_round[max(by_round)] < 6 * 64 * MiB, by_round
    assert seen["spilled_bytes"] < ROUNDS * 64 * MiB
    log = (tmp_path / "run" / "graph" / "driver" / "output.log").read_text()
    assert "buffer: 80 samples × 1 MiB = 80 MiB of the 200 MiB object store" in log
    assert "may take 208 MiB (104 %)" in log
    for text in ("ObjectStoreFull", "OutOfMemory", "out of memory"):
        assert text not in log and text not in proc.stderr
    assert (tmp_path / "run" / "graph" / "z" / "estimator.pt").exists()
    assert list((tmp_path / "run" / "samples" / "posterior").glob("*/000000.npz"))
