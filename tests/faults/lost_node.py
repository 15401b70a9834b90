"""A ``ray start`` cluster of one head and several worker "machines", one of which can be lost.

Built on :class:`tests.integration.real_cluster.RealCluster` (token authentication, the head
with ``kestrel_head``, each worker in its own mount namespace with a tmpfs over the hidden
folders). :meth:`LostNodeCluster.lose_worker` kills a worker node as a machine loss would:
``SIGKILL`` to every process of that node at once — its process group (``ray start --block``,
the raylet, the object store) and every process living in the node's mount namespace (the
workers and actors the raylet started, whatever their process group) — with no chance to say
goodbye to the head, which learns of the loss from missed health checks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ..integration.real_cluster import RAY, RealCluster, free_port


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


class LostNodeCluster(RealCluster):
    """Head (``kestrel_head``, 1 CPU) and ``workers`` worker nodes, each offering
    ``worker_resources`` and ``worker_cpus`` CPUs; :meth:`lose_worker` kills one."""

    def __init__(
        self,
        hidden: list[Path],
        worker_resources: dict[str, float],
        workers: int = 2,
        worker_cpus: int = 1,
    ) -> None:
        super().__init__(hidden, worker_resources, worker_cpus=worker_cpus)
        self.workers = workers

    def _reset(self) -> None:
        super()._reset()
        #: the ``unshare … ray start`` process of each worker node (its process group's leader)
        self.worker_procs: list[subprocess.Popen] = []

    def _start(self) -> None:
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
            "1",
            "--temp-dir",
            str(self.temp_dir),
            "--disable-usage-stats",
            "--include-dashboard",
            "false",
            "--resources",
            json.dumps({"kestrel_head": 1}),
            "--dashboard-agent-listen-port",
            str(free_port()),
        ]
        self._spawn(head, "head.log")
        self._wait_log("head.log", "Ray runtime started", 90)
        for _ in range(self.workers):
            self.add_worker()

    def add_worker(self) -> int:
        """Start one more worker node (it joins the running cluster); returns its index."""
        i = len(self.worker_procs)
        mounts = " && ".join(f"mount -t tmpfs kestrel-hidden {p}" for p in self.hidden)
        worker = " ".join(
            [
                *RAY,
                "start",
                "--address",
                self.address,
                "--block",
                "--node-ip-address",
                # its own loopback address: on the head's, a driver may join a worker node
                # (Ray takes whichever node it lists first for an address), and the store,
                # started on the driver's node, would die with that worker
                f"127.0.0.{i + 2}",
                "--num-cpus",
                str(self.worker_cpus),
                "--disable-usage-stats",
                "--dashboard-agent-listen-port",
                str(free_port()),
                "--resources",
                "'" + json.dumps(self.worker_resources) + "'",
            ]
        )
        proc = self._spawn(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
            + [f"{mounts} && exec {worker}"],
            f"worker{i}.log",
        )
        self.worker_procs.append(proc)
        self._wait_log(f"worker{i}.log", "Ray runtime started", 90)
        alive = 1 + sum(1 for p in self.worker_procs if p.poll() is None)
        self._wait_nodes(alive, 90)
        return i

    def worker_pids(self, i: int, ns: str | None = None) -> list[int]:
        """Every process of worker node ``i``: its process group and its mount namespace
        (``ns``, read from the group's leader by default)."""
        leader = self.worker_procs[i].pid
        ns = ns or _mount_ns(leader)
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                same_group = os.getpgid(pid) == leader
            except OSError:
                continue
            if same_group or (ns is not None and _mount_ns(pid) == ns and pid != os.getpid()):
                pids.append(pid)
        return pids

    def lose_worker(self, i: int) -> list[int]:
        """``SIGKILL`` every process of worker node ``i`` (repeated until none is left, so a
        process forked meanwhile goes too); returns the pids killed."""
        ns = _mount_ns(self.worker_procs[i].pid)
        assert ns is not None and ns != _mount_ns(os.getpid()), "worker not in its own namespace"
        killed: list[int] = []
        for _ in range(20):
            pids = [p for p in self.worker_pids(i, ns) if p not in killed or _alive(p)]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed.extend(p for p in pids if p not in killed)
            time.sleep(0.05)
        try:
            self.worker_procs[i].wait(10)
        except subprocess.TimeoutExpired:
            pass
        if self.worker_procs[i] in self._procs:  # gone: no longer one of the cluster's to stop
            self._procs.remove(self.worker_procs[i])
        return killed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def worker_of(cluster: LostNodeCluster, pid: int) -> int:
    """The index of the worker node whose mount namespace holds process ``pid``."""
    ns = _mount_ns(pid)
    for i, proc in enumerate(cluster.worker_procs):
        if proc.poll() is None and ns is not None and _mount_ns(proc.pid) == ns:
            return i
    raise AssertionError(f"process {pid} runs on no live worker node of the cluster")
