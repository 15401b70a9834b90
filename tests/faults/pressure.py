"""Memory pressure: samples of 1 MiB through an object store of 200 MiB (issue 11 item 3).

A launch on a local Ray of its own (``ray.object_store_memory`` in the config) with
``max_samples`` 64 of 1 MiB samples runs :data:`ROUNDS` resimulation rounds of 64 samples, 10
times what the buffer keeps, then stops as on Ctrl-C (saved, sampled). Each sample carries a
1 MiB ``image`` beside the small ``x`` the estimator conditions on: the store holds, appends,
evicts and snapshots the megabytes, while training stays fast (an estimator conditioned on
131072 features spends ~3 s an epoch on this machine standardising them). A thread reads the object
store's counters meanwhile (:class:`tests.faults.soak.RaySource`): its peak use, and the bytes
Ray spilled to disk. ``tests/faults/test_memory_pressure.py`` runs it in a subprocess (a Ray
with a small store needs a process of its own)::

    python -m tests.faults.pressure --run-dir DIR --out pressure.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

#: the object store of the run
STORE_BYTES = 200 * 2**20
#: resimulation rounds before the run is stopped
ROUNDS = 10
BUFFER = {"min_samples": 32, "max_samples": 64, "validation_samples": 16, "simulate_count": 64}


def pressure_config(
    folder: Path, *, max_samples: int | None = None, journal: bool = True
) -> dict[str, Any]:
    """The config: 1 MiB samples, a 200 MiB store, a small Gaussian estimator
    (``journal``: ``buffer.journal``, to measure what the journal costs)."""
    from kestrel_core import BufferConfig

    obs = folder / "obs.npy"
    np.save(obs, np.array([0.4, 0.6]))
    buffer: dict[str, Any] = dict(BUFFER)
    if max_samples is not None:
        buffer["max_samples"] = max_samples
    buffer["journal"] = journal
    known = getattr(BufferConfig, "__dataclass_fields__", {})
    if "simulate_interval" in known:
        buffer["simulate_interval"] = 0.01
    if "epochs_per_round" in known:
        buffer["epochs_per_round"] = 1
    return {
        "ray": {"object_store_memory": STORE_BYTES, "num_cpus": 2},
        "buffer": buffer,
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", 0.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": {
                    "_target_": "kestrel_torch.GaussianPosterior",
                    "max_epochs": 10**6,
                    "early_stop_patience": 10**6,
                    "hidden_dim": 16,
                    "num_layers": 1,
                },
            },
            "x": {
                "simulator": {"_target_": "kestrel_core.testing.models.Noise"},
                "parents": ["z"],
                "observed": str(obs),
            },
            "image": {
                "simulator": {"_target_": "kestrel_core.testing.models.Megabyte"},
                "parents": ["z"],
            },
        },
        "sample": {"posterior": {"n": 8}},
    }


class Watch:
    """A launch's progress object: stops the run (as Ctrl-C) after ``rounds`` rounds and reads
    the object store's counters every ``every`` seconds meanwhile."""

    def __init__(self, rounds: int, every: float = 0.25):
        self.initial = BUFFER["min_samples"] + BUFFER["validation_samples"]
        self.rounds = rounds
        self.every = every
        self.simulated = 0
        self.peak = 0
        self.spilled = 0
        self.readings = 0
        self.spill_by_round: dict[int, int] = {}  # rounds done → bytes spilled by then
        self.t0 = time.monotonic()
        self.phases: dict[str, float] = {}  # phase → seconds after start when it began
        self.stopped_at: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        """Start reading (Ray runs)."""
        from tests.faults.soak import RaySource

        self._source = RaySource(public=False)
        self._thread.start()

    def update(self, state: Any) -> None:
        """Count rounds; after the last, ask for the graceful stop Ctrl-C asks for."""
        self.simulated = int(state.simulated)
        self.phases.setdefault(str(state.phase), round(time.monotonic() - self.t0, 1))
        done = (self.simulated - self.initial) // BUFFER["simulate_count"]
        self.spill_by_round.setdefault(max(done, 0), self.spilled)
        if done >= self.rounds and self.stopped_at is None:
            self.stopped_at = time.monotonic()
            os.kill(os.getpid(), signal.SIGINT)

    def stop(self) -> None:
        """Stop reading (one last reading first)."""
        self._done.set()
        self._thread.join(timeout=30)
        self._read()

    def _loop(self) -> None:
        while not self._done.wait(self.every):
            self._read()

    def _read(self) -> None:
        used, _, spilled = self._source.store()
        self.peak = max(self.peak, used)
        self.spilled = max(self.spilled, spilled)
        self.readings += 1


def main(argv: list[str] | None = None) -> int:
    """Run the launch; write what it saw as JSON (``--out``)."""
    parser = argparse.ArgumentParser(prog="python -m tests.faults.pressure")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--no-journal", action="store_true", help="buffer.journal: false")
    args = parser.parse_args(argv)

    import ray

    from kestrel import launch

    folder = Path(args.run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    watch = Watch(args.rounds)
    t0 = time.monotonic()
    result = launch(
        pressure_config(folder, journal=not args.no_journal),
        folder / "run",
        seed=0,
        progress=watch,
        timeout=600,
    )
    out = {
        "status": str(result.status),
        "simulated": int(result.simulated),
        "rounds": (int(result.simulated) - watch.initial) // BUFFER["simulate_count"],
        "epochs": dict(result.epochs),
        "peak_store_bytes": watch.peak,
        "spilled_bytes": watch.spilled,
        "readings": watch.readings,
        "spilled_by_round": watch.spill_by_round,
        "phases": watch.phases,
        "store_bytes": STORE_BYTES,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    assert not ray.is_initialized()  # the launch started Ray and shut it down
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
