"""Many nodes: Kestrel's own cost with K Ray nodes and R sleeping simulator replicas (issue 32).

Marked ``nodes``, run only by ``hatch run bench:nodes`` (not in ``bench:check``): for each K
in :data:`NODES` a :class:`kestrel_bench._cluster.LocalCluster` of K ``ray start`` nodes on
this machine (the head: 1 CPU, the estimator and the store; K − 1 workers with ``--num-cpus
0`` and the resource ``sim``), and for each R in :data:`REPLICAS` one ``kestrel.launch`` in
this process, joined to that cluster:

θ ~ U(−1, 1)², x = θ + 0.1·ε from :class:`kestrel_bench.SleepSimulator` — ``MS`` ms of
*sleep* a sample (an external code on another machine costs this one no CPU, so what the
launch spends is Kestrel's orchestration alone) — on ``num_actors: R`` replicas, each with
``num_cpus: 0``, ``resources: {sim: 1}`` and ``scheduling_strategy: SPREAD`` (spread evenly
over the workers). A GaussianPosterior trains :data:`EPOCHS` epochs and then stops
(``budget.stop_early: true``); the rest of the budget (:data:`PER_REPLICA` samples a replica) is drawn from its final proposal in
rounds of :data:`ROWS` rows a replica (``simulate_count: ROWS·R``, ``epochs_per_round: 0``,
``simulate_interval: 0``; two rounds in flight, the next queued on each replica behind the
current one). The driver's own training thread is thus idle: the figures are what rounds,
appends, the journal and the store cost.

Measured from ``RUN/profile.json``: each replica's ``busy_share`` (its sleeps over the time
simulations could run; ``idle_s``: a median replica's seconds without a call), the busy share
of the rounds after training ended (``steady_busy``, from the driver's log: the steady state,
without the start-up's gaps), the driver's CPU seconds over the simulating parts
(``cpu_s.driver_simulating``: the launch's process, Ray's threads in it included) and the
store actor's (``cpu_s.store``), each per 1000 simulations; the 1-minute load average before
and after each launch. The timed value of the benchmark is the driver's CPU per 1000
simulations. ``python -m kestrel_bench.nodes JSON`` prints the table and the exponents of
each cost in R.

Sizes from the environment for a quick try: ``KESTREL_BENCH_NODES=2 KESTREL_BENCH_REPLICAS=8
hatch run bench:nodes``.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kestrel_bench import pedantic_inner

pytestmark = pytest.mark.nodes


def _sizes(name: str, default: tuple[int, ...]) -> tuple[int, ...]:
    value = os.environ.get(name, "").strip()
    return tuple(int(v) for v in value.split(",")) if value else default


#: Ray nodes in the cluster (the head and K − 1 workers)
NODES = _sizes("KESTREL_BENCH_NODES", (8, 16))
#: simulator replicas (``num_actors``)
REPLICAS = _sizes("KESTREL_BENCH_REPLICAS", (32, 64, 128))
MS = float(os.environ.get("KESTREL_BENCH_MS", "200"))  # sleep per sample, ms
ROWS = int(os.environ.get("KESTREL_BENCH_ROWS", "16"))  # rows a replica per round
PER_REPLICA = int(os.environ.get("KESTREL_BENCH_PER_REPLICA", "200"))  # resimulated a replica
EPOCHS = 3
INITIAL = {"min_samples": 512, "validation_samples": 128}


def config(replicas: int, observed: str) -> dict[str, Any]:
    """The launch's config for ``replicas`` sleeping replicas."""
    from kestrel_bench._cluster import HEAD_RESOURCE

    initial = INITIAL["min_samples"] + INITIAL["validation_samples"]
    return {
        "buffer": dict(
            INITIAL,
            max_samples=4096,
            simulate_count=ROWS * replicas,
            epochs_per_round=0,
            simulate_interval=0.0,
        ),
        # stop_early: training ends at EPOCHS, the rest of the budget drawn from the final
        # proposal (without it, training goes on while the budget's rounds come: issue 31)
        "budget": {"simulations": initial + PER_REPLICA * replicas, "stop_early": True},
        "graph": {
            "theta": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -1.0, 1.0], ["uniform", -1.0, 1.0]],
                },
                "evidence": ["x"],
                "estimator": {
                    "_target_": "kestrel_torch.GaussianPosterior",
                    "max_epochs": EPOCHS,
                    "early_stop_patience": EPOCHS,
                },
                "ray": {"resources": {HEAD_RESOURCE: 0.01}},
            },
            "x": {
                "simulator": {"_target_": "kestrel_bench.SleepSimulator", "ms": MS},
                "parents": ["theta"],
                "num_actors": replicas,
                "observed": observed,
                "dry_run": False,
                "ray": {
                    "num_cpus": 0,
                    "resources": {"sim": 1},
                    "scheduling_strategy": "SPREAD",
                },
            },
        },
        "sample": {"posterior": {"n": 100}},
    }


@pytest.fixture(scope="module", params=NODES, ids=lambda k: f"K{k}")
def cluster(request):
    """A cluster of K nodes, this process its driver (Ray initialised here, shut down after)."""
    import ray

    from kestrel_bench._cluster import LocalCluster

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    with LocalCluster(request.param, {"sim": 1000}) as c:
        os.environ["RAY_AUTH_MODE"] = "disabled"
        os.environ.pop("RAY_ADDRESS", None)
        ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
        try:
            yield c
        finally:
            ray.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def steady_busy(log: Path, replicas: int) -> tuple[float | None, float | None]:
    """Busy share of the rounds drawn after training ended, from the driver's log: the sleep
    the rows left then cost a replica over the seconds from "training ended" to "rounds: no
    more"; ``(share, seconds)``, ``(None, None)`` when the log has no such lines."""
    ended = done = left = None
    for line in log.read_text(errors="replace").splitlines():
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        when = datetime.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        rows = re.search(r"training ended with (\d+) simulations", line)
        if rows:
            ended, left = when, int(rows.group(1))
        elif "rounds: no more" in line:
            done = when
    if ended is None or done is None or left is None or done <= ended:
        return None, None
    return round(left / replicas * MS / 1000.0 / (done - ended), 4), round(done - ended, 2)


def _kind(node: int, title: str) -> str:
    if title.startswith("ray::RunNodeWrapper"):
        return "replicas" if node else "estimator"
    if title.startswith("ray::SampleStore"):
        return "store"
    if title.endswith("/raylet") or title.endswith("/gcs_server"):
        return "raylets+gcs"
    return "other Ray"


class Placement:
    """Where the launch's actors run and the CPU the cluster's processes use while all of them
    are up: read every 2 s from the cluster's processes (:meth:`LocalCluster.processes`) while
    the launch runs. ``actors``/``store``: node → count at the snapshot with the most node
    actors; ``cores``: kind (``replicas``, ``estimator``, ``store``, ``raylets+gcs``, ``other
    Ray``, ``driver``) → CPU seconds per second between the first and the last snapshot with
    all ``expected`` node actors up."""

    def __init__(self, cluster: Any, expected: int) -> None:
        self.cluster, self.expected = cluster, expected
        self.actors: dict[int, int] = {}
        self.store: dict[int, int] = {}
        self.cores: dict[str, float] = {}
        self.cpu_s = 0.0
        self._first: tuple[float, dict[int, tuple[str, float]]] | None = None
        self._last: tuple[float, dict[int, tuple[str, float]]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tick(self) -> None:
        procs = self.cluster.processes()
        actors: dict[int, int] = {}
        store: dict[int, int] = {}
        for _, node, title, _ in procs:
            if title.startswith("ray::RunNodeWrapper"):
                actors[node] = actors.get(node, 0) + 1
            elif title.startswith("ray::SampleStore"):
                store[node] = store.get(node, 0) + 1
        if sum(actors.values()) > sum(self.actors.values()):
            self.actors, self.store = actors, store
        if sum(actors.values()) >= self.expected:
            snap = {pid: (_kind(node, title), cpu) for pid, node, title, cpu in procs}
            snap[-1] = ("driver", time.process_time())
            snap[-2] = ("sampler", time.thread_time())
            self._last = (time.monotonic(), snap)
            self._first = self._first or self._last

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            self._tick()
        self.cpu_s = time.thread_time()  # this thread's own CPU (the driver's process counts it)

    def __enter__(self) -> Placement:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._first is None or self._last is None or self._last[0] <= self._first[0]:
            return
        (t0, first), (t1, last) = self._first, self._last
        used: dict[str, float] = {}
        for pid, (kind, cpu) in last.items():
            if pid in first and first[pid][0] == kind:
                used[kind] = used.get(kind, 0.0) + cpu - first[pid][1]
        used["driver"] = used.get("driver", 0.0) - used.pop("sampler", 0.0)
        self.cores = {k: round(v / (t1 - t0), 3) for k, v in sorted(used.items())}
        self.cores["window_s"] = round(t1 - t0, 1)


def _measure(cluster: Any, replicas: int, folder: Path) -> dict[str, Any]:
    """One launch; its profile's figures."""
    import numpy as np

    from kestrel import launch

    folder.mkdir(parents=True)
    np.save(folder / "obs.npy", np.array([0.2, -0.3]))
    cfg = config(replicas, str(folder / "obs.npy"))
    load_before = os.getloadavg()[0]
    cpu0, t0 = time.process_time(), time.monotonic()
    with Placement(cluster, replicas + 1) as placed:
        result = launch(cfg, folder / "run", seed=1, progress=False)
    cpu_launch, wall = time.process_time() - cpu0, time.monotonic() - t0
    load_after = os.getloadavg()[0]
    assert result.status == "completed", result.status
    profile = json.loads((folder / "run" / "profile.json").read_text())
    x = profile["actors"]["x"]
    busy = sorted(float(r["busy_share"]) for r in x)
    sims = sum(int(r["samples"]) for r in x)
    driver = profile["driver"]
    simulating = sum(
        float(driver[k]["seconds"])
        for k in ("initial simulation", "training", "stopping")
        if k in driver
    )
    cpu = dict(profile["cpu_s"])
    # the driver's process ran the placement sampler too (a /proc scan every 2 s): its CPU is
    # taken out of the driver's, in proportion to the time
    share = simulating / max(wall, 1e-9)
    cpu["driver_simulating"] = max(0.0, cpu["driver_simulating"] - placed.cpu_s * share)
    cpu_launch -= placed.cpu_s
    per_k = 1000.0 / sims
    steady, steady_s = steady_busy(folder / "run" / "graph" / "driver" / "output.log", replicas)
    work = sorted(int(r["samples"]) for r in x)[len(x) // 2] * MS / 1000.0
    return {
        "nodes": cluster.nodes,
        "replicas": replicas,
        "simulations": sims,
        "ms_per_sample": MS,
        "rows_per_round": ROWS * replicas,
        "busy_min": busy[0],
        "busy_median": busy[len(busy) // 2],
        "busy_share": busy,
        "simulating_s": round(simulating, 2),
        "idle_s": round(simulating - work, 2),  # a median replica's seconds without a call
        # of it, in the initial simulation (its rows split evenly over the replicas)
        "initial_idle_s": round(
            float(driver.get("initial simulation", {}).get("seconds", 0.0))
            - (INITIAL["min_samples"] + INITIAL["validation_samples"]) / replicas * MS / 1000.0,
            2,
        ),
        "steady_busy": steady,
        "steady_s": steady_s,
        "starting_s": float(driver.get("starting", {}).get("seconds", 0.0)),
        "launch_wall_s": round(wall, 2),
        "driver_cpu_launch_s": round(cpu_launch, 2),
        "driver_cpu_s": round(cpu["driver_simulating"], 3),
        "sampler_cpu_s": round(placed.cpu_s, 3),
        "store_cpu_s": cpu["store"],
        "driver_cpu_per_1000": round(cpu["driver_simulating"] * per_k, 4),
        "store_cpu_per_1000": None if cpu["store"] is None else round(cpu["store"] * per_k, 4),
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "cpus": os.cpu_count(),
        "cluster_start_s": round(cluster.start_seconds or 0.0, 1),
        # node actors per node (0: the head, where the estimator's is) and the store's node
        "placement": {str(k): v for k, v in sorted(placed.actors.items())},
        "store_node": sorted(placed.store),
        # CPU cores each kind of process used while every replica was up
        "cores": placed.cores,
    }


@pytest.mark.parametrize("replicas", REPLICAS, ids=lambda r: f"R{r}")
def test_orchestration_cost_with_many_nodes(benchmark, cluster, tmp_path, replicas) -> None:
    from kestrel_bench.nodes import render

    def run() -> tuple[float, dict[str, Any]]:
        row = _measure(cluster, replicas, tmp_path / f"R{replicas}-{len(os.listdir(tmp_path))}")
        return row["driver_cpu_per_1000"], row

    row = pedantic_inner(benchmark, run, rounds=1, warmup_rounds=0, where="driver CPU / 1000")
    benchmark.group = "nodes"
    benchmark.extra_info.update(group="nodes", **row)
    print("\n" + render([row]))
    assert row["simulations"] >= PER_REPLICA * replicas  # every replica's share was simulated
    assert row["busy_min"] > 0, row["busy_share"]  # every replica simulated
