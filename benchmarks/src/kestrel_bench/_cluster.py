"""A Ray cluster of many nodes on this one machine: ``ray start`` processes (``bench:nodes``).

:class:`LocalCluster` starts a head (``ray start --head --block``) and ``nodes − 1`` worker
nodes (``ray start --address … --block``), each in a process group of its own, as
``tests/integration/real_cluster.py`` does for its two-node cluster: the head on
``127.0.0.1``, worker ``i`` on ``127.0.0.<i+1>`` (all loopback; a driver joins the head). The
head offers ``head_cpus`` CPUs and the resource ``kestrel_head`` (the estimator is pinned to
it by that resource; where the store actor, ``num_cpus: 0``, runs is Ray's choice unless
Kestrel pins it: :meth:`LocalCluster.placement` tells); each worker offers no CPU (``--num-cpus 0``) and the custom ``worker_resources`` (e.g.
``{"sim": 1000}``) that the simulator replicas request, so the replicas run on the workers
only. Every node gets a small object store (``object_store_mb``) and its own range of worker
ports (nodes on one address would otherwise hand out the same ports); worker nodes run no log
monitor (their actors' output is not streamed to a driver).

Token authentication is off (``RAY_AUTH_MODE=disabled`` on the nodes; :meth:`driver_env`
for a driver): the cluster listens on loopback addresses only and lives for one benchmark.

Teardown ends exactly what this cluster started — its process groups, then any process whose
command line names the cluster's own temp dir — never ``ray stop``, which would stop every Ray
on the machine (other test runs share it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["LocalCluster", "HEAD_RESOURCE"]

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
#: the custom resource only the head offers (pin an actor to the head with ``{HEAD_RESOURCE: 0.01}``)
HEAD_RESOURCE = "kestrel_head"
#: worker ports per node (a replica actor takes one; restarts take more)
_PORTS_PER_NODE = 400
_PORT_BASE = 30000
#: worker nodes started at once (16 at once overload the GCS of a 2-core machine)
_START_BATCH = 3


def _worker_ip(index: int) -> str:
    """Worker ``index``'s address: ``127.0.0.<index + 1>`` (the head is ``127.0.0.1``). On one
    address a driver joins whichever node Ray lists first for it, often a worker; on their own
    addresses (all loopback) the driver's node is the head, as on a real cluster."""
    return f"127.0.0.{index + 1}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """Head + ``nodes − 1`` workers on this machine; ``address`` is the head's ``host:port``.

    Args:
        nodes: Ray nodes in all (≥ 1; the head is one of them).
        worker_resources: custom resources each worker node offers.
        head_cpus: CPUs the head offers.
        object_store_mb: object store of each worker node, MiB (≥ 75, Ray's minimum); the head
            gets four times as much (the driver's and the store's objects live there).
        start_timeout: seconds for each node to report "Ray runtime started".

    Raises:
        ValueError: ``nodes`` < 1 or ``object_store_mb`` < 75.
        RuntimeError: a node did not start (its log's tail in the message); what had started
            is torn down.
    """

    def __init__(
        self,
        nodes: int,
        worker_resources: Mapping[str, float],
        *,
        head_cpus: int = 1,
        object_store_mb: int = 100,
        start_timeout: float = 180.0,
    ) -> None:
        if nodes < 1 or object_store_mb < 75:
            raise ValueError(
                f"LocalCluster: nodes must be >= 1 and object_store_mb >= 75, got {nodes}, "
                f"{object_store_mb}"
            )
        self.nodes = int(nodes)
        self.worker_resources = dict(worker_resources)
        self.head_cpus = int(head_cpus)
        self.object_store_mb = int(object_store_mb)
        self.start_timeout = float(start_timeout)
        # short: Ray's socket paths live under it and must stay below the 107-byte limit
        self.temp_dir = Path(tempfile.mkdtemp(prefix="kn", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.start_seconds: float | None = None
        self._procs: list[subprocess.Popen] = []
        self._node_pids: dict[int, int] = {}  # node index (0: head) → its ray start's pid

    # environments ---------------------------------------------------------------------------
    def driver_env(self) -> dict[str, str]:
        """The environment of a driver of this cluster (no address, token auth off)."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
        env["RAY_AUTH_MODE"] = "disabled"
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        return env

    # life cycle -----------------------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        t0 = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        out = open(self.temp_dir / log, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.driver_env(),
            start_new_session=True,
            cwd=self.temp_dir,
        )
        out.close()
        self._procs.append(proc)
        return proc

    def _ports(self, index: int) -> list[str]:
        low = _PORT_BASE + index * _PORTS_PER_NODE
        return [
            "--min-worker-port",
            str(low),
            "--max-worker-port",
            str(low + _PORTS_PER_NODE - 1),
            # every Ray on this host would take the agent's default port 52365
            "--dashboard-agent-listen-port",
            str(_free_port()),
        ]

    def _start(self) -> None:
        mib = 1024 * 1024
        head = [
            *RAY,
            "start",
            "--head",
            "--block",
            "--port",
            str(self.port),
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            str(self.head_cpus),
            "--temp-dir",
            str(self.temp_dir),
            "--disable-usage-stats",
            "--include-dashboard",
            "false",
            "--ray-client-server-port",
            str(_free_port()),
            "--object-store-memory",
            str(4 * self.object_store_mb * mib),
            "--resources",
            json.dumps({HEAD_RESOURCE: 1}),
            *self._ports(0),
        ]
        head_proc = self._spawn(head, "head.log")
        self._node_pids[0] = head_proc.pid
        self._wait_log("head.log", "Ray runtime started", head_proc)
        workers = list(range(1, self.nodes))
        for first in range(0, len(workers), _START_BATCH):  # at once, they overload the GCS
            batch = workers[first : first + _START_BATCH]
            procs = {i: self._spawn(self._worker_argv(i), f"worker{i}.log") for i in batch}
            for i in batch:
                try:
                    self._wait_log(f"worker{i}.log", "Ray runtime started", procs[i])
                except RuntimeError:  # a loaded GCS may time a joining node out: once more
                    if procs[i].poll() is None:
                        raise
                    procs[i] = self._spawn(self._worker_argv(i), f"worker{i}.log")
                    self._wait_log(f"worker{i}.log", "Ray runtime started", procs[i])
                self._node_pids[i] = procs[i].pid
        self._wait_nodes()

    def _worker_argv(self, index: int) -> list[str]:
        return [
            *RAY,
            "start",
            "--address",
            self.address,
            "--block",
            "--node-ip-address",
            _worker_ip(index),
            "--num-cpus",
            "0",
            "--disable-usage-stats",
            "--object-store-memory",
            str(self.object_store_mb * 1024 * 1024),
            "--resources",
            json.dumps(self.worker_resources),
            # no log monitor (~80 MB and a process a node): the workers' actor output is
            # not streamed to drivers (the benchmark's runs with log_to_driver=False)
            "--include-log-monitor",
            "false",
            *self._ports(index),
        ]

    def _wait_log(self, name: str, text: str, proc: subprocess.Popen) -> None:
        """Wait for ``text`` in the log ``name`` of ``proc``; RuntimeError when ``proc`` ends
        or the start timeout passes first."""
        deadline = time.monotonic() + self.start_timeout
        path = self.temp_dir / name
        while time.monotonic() < deadline:
            content = path.read_text(errors="replace") if path.exists() else ""
            if text in content:
                return
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(
            f"{name}: no {text!r} within {self.start_timeout:g} s:\n"
            + (path.read_text(errors="replace")[-3000:] if path.exists() else "")
        )

    def _wait_nodes(self) -> None:
        code = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(1 for node in ray.nodes() if node['Alive']))"
        )
        deadline = time.monotonic() + self.start_timeout
        seen = ""
        while time.monotonic() < deadline:
            done = subprocess.run(
                [sys.executable, "-c", code, self.address],
                capture_output=True,
                text=True,
                env=self.driver_env(),
                timeout=120,
            )
            seen = done.stdout.strip() or done.stderr[-500:]
            if seen == str(self.nodes):
                return
            time.sleep(1)
        raise RuntimeError(f"the cluster did not reach {self.nodes} nodes: {seen}")

    def processes(self) -> list[tuple[int, int, str, float]]:
        """``(pid, node index, title, CPU seconds)`` of every process of this cluster's nodes
        (node 0: the head, i: worker i; a node's processes descend from its ``ray start``,
        actors as children of its raylet; the title is the command line's first word, Ray's
        ``ray::Class…`` for an actor). CPU seconds: user + system since the process began."""
        nodes = {pid: i for i, pid in self._node_pids.items()}
        tick = os.sysconf("SC_CLK_TCK")
        info: dict[int, tuple[int, str, float]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            info[int(entry.name)] = (
                int(fields[1]),
                title,
                (int(fields[11]) + int(fields[12])) / tick,
            )
        out = []
        for pid, (_, title, cpu) in info.items():
            up = pid
            for _ in range(8):  # up the parents to a node's ray start
                if up in nodes:
                    out.append((pid, nodes[up], title, cpu))
                    break
                up = info[up][0] if up in info else 0
                if up <= 1:
                    break
        return out

    def placement(self, title: str) -> dict[int, int]:
        """Node index (0: the head) → how many of this cluster's processes have a title
        starting with ``title`` (:meth:`processes`), e.g. ``"ray::RunNodeWrapper"``."""
        out: dict[int, int] = {}
        for _, node, name, _ in self.processes():
            if name.startswith(title):
                out[node] = out.get(node, 0) + 1
        return out

    def own_pids(self) -> list[int]:
        """Processes whose command line names this cluster's temp dir."""
        mine = str(self.temp_dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if mine in (entry / "cmdline").read_bytes():
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def stop(self) -> None:
        """End every process this cluster started (idempotent); remove its temp dir."""
        for proc in self._procs:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self._procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for proc in self._procs:  # what a node left behind in its group
            _signal_group(proc.pid, signal.SIGKILL)
        for pid in self.own_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
