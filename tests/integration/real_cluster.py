"""A Ray cluster of two "machines" on one host, for the multi-machine tests.

The head is started with ``ray start --head --block`` in its own process group; the worker
node with ``ray start --address … --block`` inside ``unshare --mount`` with a tmpfs mounted
over each of ``hidden`` (the example folder, the run directory's parent): the worker's
processes see empty folders there, as a second machine with its own disk would. Both nodes run
with token authentication (``RAY_AUTH_MODE=token``, the token in a file named by
``RAY_AUTH_TOKEN_PATH``), as a cluster administrator sets it up per Ray's documentation; the
driver under test gets the token file but *not* ``RAY_AUTH_MODE``.

Teardown ends exactly the processes this cluster started: the two process groups, then any
process whose command line names the cluster's own temp dir (never ``ray stop``, which would
stop every Ray on the machine).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = [sys.executable, "-m", "ray.scripts.scripts"]


def unshare_works() -> bool:
    """Whether this process may create a mount namespace and mount a tmpfs in it."""
    if shutil.which("unshare") is None:
        return False
    probe = tempfile.mkdtemp(prefix="kestrel-unshare-")
    try:
        done = subprocess.run(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"mount -t tmpfs kestrel-probe {probe} && touch {probe}/x",
            ],
            capture_output=True,
            timeout=20,
        )
        return done.returncode == 0 and not os.path.exists(os.path.join(probe, "x"))
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


#: what ``ray start`` says when a node could not start because its control store (GCS) did not
#: answer in time — seen on a loaded 2-core machine
STARTUP_TIMEOUT = "timed out during startup"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RealCluster:
    """Head + worker node; ``address`` is the head's ``host:port``.

    Args:
        hidden: folders the worker node must not see (a tmpfs is mounted over each).
        worker_resources: custom resources of the worker node (nodes are pinned to it by them).
        worker_cpus: CPUs the worker node offers.
        dashboard: start the head's dashboard (Ray's job server), at :attr:`dashboard_url`.
    """

    def __init__(
        self,
        hidden: list[Path],
        worker_resources: dict[str, float],
        worker_cpus: int = 2,
        dashboard: bool = False,
    ) -> None:
        self.hidden = [Path(p) for p in hidden]
        self.worker_resources = worker_resources
        self.worker_cpus = worker_cpus
        self.dashboard = dashboard
        self._reset()

    def _reset(self) -> None:
        """A fresh cluster's folder, token, ports and processes (none started yet)."""
        # short: Ray's socket paths live under it and must stay below the 107-byte limit
        self.temp_dir = Path(tempfile.mkdtemp(prefix="kc", dir="/tmp"))
        self.token_path = self.temp_dir / "auth_token"
        self.token_path.write_text(secrets.token_hex(32))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard_port = free_port()
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self._procs: list[subprocess.Popen] = []

    # environments -------------------------------------------------------------------------
    def node_env(self) -> dict[str, str]:
        """Environment of the cluster's own nodes: token authentication on."""
        env = self.driver_env()
        env["RAY_AUTH_MODE"] = "token"
        return env

    def driver_env(self) -> dict[str, str]:
        """Environment of a driver under test: the token file, no auth mode, no address."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
        }
        env["RAY_AUTH_TOKEN_PATH"] = str(self.token_path)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # life cycle ---------------------------------------------------------------------------
    def __enter__(self) -> RealCluster:
        for attempt in range(2):
            try:
                self._start()
                return self
            except BaseException as err:
                self.stop()
                # Ray's own startup failure on a loaded machine (its control store did not
                # answer a new node in time): what the tests check starts after it, so a fresh
                # cluster gets one more try
                if attempt == 0 and STARTUP_TIMEOUT in str(err):
                    self._reset()
                    continue
                raise
        raise AssertionError("unreachable")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        out = open(self.temp_dir / log, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=self.node_env(),
            start_new_session=True,
            cwd=self.temp_dir,
        )
        out.close()
        self._procs.append(proc)
        return proc

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
            "--resources",
            json.dumps({"kestrel_head": 1}),
            # every Ray on this host would take the agent's default port 52365
            "--dashboard-agent-listen-port",
            str(free_port()),
        ]
        if self.dashboard:
            head += [
                "--include-dashboard",
                "true",
                "--dashboard-host",
                "127.0.0.1",
                "--dashboard-port",
                str(self.dashboard_port),
            ]
        else:
            head += ["--include-dashboard", "false"]
        self._spawn(head, "head.log")
        self._wait_log("head.log", "Ray runtime started", 90)
        mounts = " && ".join(f"mount -t tmpfs kestrel-hidden {p}" for p in self.hidden)
        worker = " ".join(
            [
                *RAY,
                "start",
                "--address",
                self.address,
                "--block",
                "--node-ip-address",
                "127.0.0.1",
                "--num-cpus",
                str(self.worker_cpus),
                "--disable-usage-stats",
                "--dashboard-agent-listen-port",
                str(free_port()),
                "--resources",
                "'" + json.dumps(self.worker_resources) + "'",
            ]
        )
        self._spawn(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"{mounts} && exec {worker}",
            ],
            "worker.log",
        )
        self._wait_log("worker.log", "Ray runtime started", 90)
        self._wait_nodes(2, 60)

    def _wait_log(self, name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = self.temp_dir / name
        while time.monotonic() < deadline:
            content = path.read_text(errors="replace") if path.exists() else ""
            if text in content:
                return
            if any(p.poll() is not None for p in self._procs):
                break
            time.sleep(0.5)
        raise RuntimeError(
            f"{name}: no {text!r} within {timeout} s:\n"
            + (path.read_text(errors="replace")[-3000:] if path.exists() else "")
        )

    def _wait_nodes(self, n: int, timeout: float) -> None:
        code = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(1 for node in ray.nodes() if node['Alive']))"
        )
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            done = subprocess.run(
                [sys.executable, "-c", code, self.address],
                capture_output=True,
                text=True,
                env=self.node_env(),
                timeout=60,
            )
            seen = done.stdout.strip() or done.stderr[-500:]
            if seen == str(n):
                return
            time.sleep(1)
        raise RuntimeError(f"the cluster did not reach {n} nodes within {timeout} s: {seen}")

    def _own_pids(self) -> list[int]:
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
        for proc in self._procs:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self._procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(10)
        for pid in self._own_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
