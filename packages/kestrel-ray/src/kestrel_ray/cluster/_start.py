"""Starting or joining Ray, quietly and once.

Joining a cluster follows Ray's own tools: ``ray start`` turns token authentication on when
``RAY_AUTH_MODE`` is unset and a token is available, so a driver joining with ``--address`` or
``RAY_ADDRESS`` does the same (the token in ``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH``
names, or ``~/.ray/auth_token``). An address that cannot work fails in one line naming the
address, where it came from and the remedy, within seconds: nothing listening, something
listening that is not a Ray head (a stale address whose port another program took: Ray itself
would retry for ever, printing a warning every 30 s), an ``http://`` address (the dashboard's,
not the cluster's), a ``ray://`` client address.

A local Ray (no address) runs with token authentication, as Ray ≥ 2.59 does by default; Kestrel
sets ``RAY_AUTH_MODE=token`` itself when the variable is unset — the documented way to choose
the mode — so Ray does not print its "Token authentication is enabled for this Ray cluster"
WARNING on every command. ``RAY_AUTH_MODE=disabled`` in the environment opts out, as with Ray.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kestrel_ray._errors import ClusterError

if TYPE_CHECKING:
    from ray._private.worker import BaseContext

__all__ = ["init_ray", "token_source", "check_address", "check_address_format"]

#: seconds to wait for the head's address to accept a connection and answer as a Ray head
CONNECT_TIMEOUT = 5.0


def token_source(environ: dict[str, str] | None = None, home: Path | None = None) -> str | None:
    """Where an authentication token for a Ray cluster is, if anywhere.

    Args:
        environ: the environment to read (default: ``os.environ``).
        home: the home directory (default: ``Path.home()``).

    Returns:
        ``"RAY_AUTH_TOKEN"``, ``"RAY_AUTH_TOKEN_PATH (<path>)"``, ``"<home>/.ray/auth_token"``,
        or ``None`` when no usable token exists. Ray's own order of precedence.
    """
    env = os.environ if environ is None else environ
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return "RAY_AUTH_TOKEN"
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"RAY_AUTH_TOKEN_PATH ({path})" if _readable(Path(path)) else None
    default = (Path.home() if home is None else home) / ".ray" / "auth_token"
    return str(default) if _readable(default) else None


def _readable(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except OSError:
        return False


def check_address_format(address: str, source: str) -> None:
    """Refuse, in one line, a cluster address whose form cannot work (no connection tried):
    a ``ray://`` (Ray Client) or ``http(s)://`` address, or one that is not ``host:port`` or
    ``auto``. A launch checks this before it writes anything.

    Raises:
        ClusterError: naming the address, where it came from and the form expected.
    """
    where = f"{address!r} (from {source})"
    if address.startswith("ray://"):
        raise ClusterError(
            f"Ray Client addresses are not supported: {where}; run kestrel on a machine of the "
            "cluster with the head's host:port, or submit it as a job: "
            "ray job submit --working-dir DIR -- kestrel launch …"
        )
    if "://" in address:
        raise ClusterError(
            f"{where} is a URL; kestrel joins a cluster at the head's host:port (the GCS port, "
            "6379 by default), e.g. --address 10.0.0.1:6379"
        )
    if address in ("auto", "local"):  # Ray's own special addresses
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(
            f"cannot read the Ray address {where}; expected host:port, e.g. 10.0.0.1:6379"
        )


def check_address(address: str, source: str) -> None:
    """Refuse, in one line, a cluster address that cannot work.

    Args:
        address: ``"host:port"``, ``"auto"``, ``"ray://…"`` or ``"http://…"``.
        source: where it came from, for the message (``"--address"`` or ``"RAY_ADDRESS"``).

    The ``host:port`` checked is the one ``ray.init`` connects to (``127.0.0.1`` and
    ``localhost`` stand for this machine's address, as in Ray). Within :data:`CONNECT_TIMEOUT`
    seconds it must accept a TCP connection and answer a Ray head's first request (the GCS's
    ``GetClusterId``, over gRPC; a head that wants a token answers ``UNAUTHENTICATED``, which
    counts as an answer: the token is checked when Ray joins). Not checked beyond TCP with
    ``RAY_USE_TLS`` set.

    Raises:
        ClusterError: a ``ray://`` (Ray Client) or ``http(s)://`` address; a ``host:port``
            where nothing accepts a TCP connection, or whatever does is not a Ray head.
    """
    check_address_format(address, source)
    if address == "auto":
        return
    where = f"{address!r} (from {source})"
    host, _, port = address.rpartition(":")
    host = _bootstrap_host(host)
    deadline = time.monotonic() + CONNECT_TIMEOUT
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ClusterError(
            f"no Ray cluster at {where}: {reason.lower()}; start one with `ray start --head` "
            "or correct the address"
        ) from None
    _check_head(f"{host}:{port}", where, max(1.0, deadline - time.monotonic()))


def _bootstrap_host(host: str) -> str:
    """The host ``ray.init`` connects to for ``host`` (Ray's own rule for this machine)."""
    try:
        from ray._private.services import resolve_ip_for_localhost

        return str(resolve_ip_for_localhost(host))
    except Exception:  # another Ray: check the host as given
        return host


def _check_head(target: str, where: str, timeout: float) -> None:
    """Raise unless a Ray head (its GCS) answers at ``target`` within ``timeout`` seconds."""
    if os.environ.get("RAY_USE_TLS", "0").lower() not in ("", "0", "false"):
        return  # the probe would need the cluster's certificates
    try:  # grpcio comes with Ray; the GCS's service stubs are Ray's own
        grpc = importlib.import_module("grpc")
        gcs_service_pb2 = importlib.import_module("ray.core.generated.gcs_service_pb2")
        gcs_service_pb2_grpc = importlib.import_module("ray.core.generated.gcs_service_pb2_grpc")
    except ImportError:  # pragma: no cover - Ray without its gRPC stubs: TCP was checked
        return
    channel = grpc.insecure_channel(target)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout)
    except grpc.RpcError as err:
        code = err.code()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return  # a Ray head that wants a token: joining checks it
        what = (
            "answers, but not as a Ray head"
            if code == grpc.StatusCode.UNIMPLEMENTED
            else f"does not answer as a Ray head within {timeout:.0f} s"
        )
        raise ClusterError(
            f"no Ray cluster at {where}: something listens there but {what} (a stale address "
            "whose port another program took?); start one with `ray start --head` or correct "
            "the address"
        ) from None
    finally:
        channel.close()


def _use_token_auth() -> None:
    """Switch this process to token authentication (as ``ray start`` does when a token exists)."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray reads the mode into its C++ config once; re-read it now that it changed
        config = importlib.import_module("ray._raylet").Config
        config.initialize("")
    except (ImportError, AttributeError):  # pragma: no cover - other Ray versions
        pass


class _Probe:
    """A do-nothing actor: can this driver start actors on the cluster it joined?"""

    def ping(self) -> bool:
        return True


def _check_actors_start(address: str, source: str, token: str) -> None:
    """Start one tiny actor after joining with a token Kestrel chose to use.

    A cluster without authentication accepts such a driver's tasks but cancels its actors; this
    turns that into one clear error instead of a node actor dying later.

    Raises:
        ClusterError: the probe actor died (Ray is shut down first).
    """
    import ray

    probe: Any = ray.remote(num_cpus=0)(_Probe).remote()
    try:
        ray.get(probe.ping.remote(), timeout=60)
    except ray.exceptions.GetTimeoutError:
        pass  # a busy cluster: nothing learnt, nothing wrong
    except ray.exceptions.RayActorError:
        ray.shutdown()
        raise ClusterError(
            f"joined the Ray cluster at {address!r} (from {source}) with token authentication "
            f"(token from {token}), but it starts no actor for this driver: its authentication "
            "is probably off; run kestrel with RAY_AUTH_MODE=disabled, or start the cluster "
            "with RAY_AUTH_MODE=token"
        ) from None
    finally:
        if ray.is_initialized():
            ray.kill(probe)


def init_ray(
    address: str | None = None, *, source: str | None = None, **kwargs: Any
) -> BaseContext | None:
    """Start a local Ray (embedded in this process) or join a cluster; idempotent.

    ``address`` (or the ``RAY_ADDRESS`` environment variable) joins an existing cluster; without
    either, a private local Ray starts without dashboard and with Ray's own logging at WARNING
    — never a cluster that ``ray start`` left running on this machine, which a bare
    ``ray.init()`` would join. Usage
    statistics are switched off (``RAY_USAGE_STATS_ENABLED=0``) unless the environment already
    says otherwise. If Ray is already initialised in this process, nothing happens (a second
    ``launch`` in the same process reuses it). A local Ray uses token authentication
    (``RAY_AUTH_MODE=token`` unless the environment sets the mode; Ray's own default, without
    its warning). Its worker processes — simulator replicas and the estimators' training — run
    at this process's priority (``RAY_worker_niceness=0``, unless the environment sets it:
    Ray's own default, 15, makes them yield to every other program on the machine, so training
    starves on a shared machine). On a cluster started with ``ray start``, set
    ``RAY_worker_niceness=0`` in the environment of ``ray start`` for the same.

    Joining: with ``RAY_AUTH_MODE`` unset and a token available (:func:`token_source`), token
    authentication is switched on, as ``ray start`` does; the address is checked first
    (:func:`check_address`).

    Args:
        address: ``"auto"`` or ``"host:port"`` of a running cluster; ``"local"`` (Ray's word
            for a new local Ray) or ``None``: a private local Ray.
        source: where ``address`` came from, for messages (default ``"--address"``).
        **kwargs: passed to ``ray.init`` (e.g. ``num_cpus=2``, ``runtime_env``), over Kestrel's
            defaults.

    Returns:
        The ``ray.init`` context, or ``None`` when Ray was already running.

    Raises:
        ClusterError: the address cannot work, or Ray could not connect to it (the message
            names the address, its source and the likely cause).
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return None
    source = (source or "--address") if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "local":  # Ray's word for a new local Ray: what no address starts here
        address = None
    opts: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": True}
    if address is None:
        # the workers at the driver's priority, not Ray's 15 (read by the raylet and the
        # workers it starts, which inherit this environment)
        os.environ.setdefault("RAY_worker_niceness", "0")
        if os.environ.get("RAY_AUTH_MODE") is None:
            _use_token_auth()  # what Ray ≥ 2.59 does by default, said explicitly: no warning
        opts["include_dashboard"] = False
        opts.update(kwargs)
        # "local": a new Ray of this process's own; without it ray.init joins the latest cluster
        # a `ray start` on this machine left in /tmp/ray (another user's, a test suite's)
        return ray.init(address="local", **opts)
    check_address(address, source)
    token = token_source()
    mode_set = os.environ.get("RAY_AUTH_MODE")
    auto_token = mode_set is None and token is not None
    if auto_token:
        _use_token_auth()
    opts.update(kwargs)
    try:
        context = ray.init(address=address, **opts)
        if auto_token:
            _check_actors_start(address, source, str(token))
        return context
    except (ConnectionError, ray.exceptions.AuthenticationError, ValueError) as err:
        if mode_set is not None:
            hint = f"RAY_AUTH_MODE={mode_set} is set; it must match the cluster's"
        elif token is None:
            hint = (
                "no token found; if the cluster uses tokens, put its token in "
                "~/.ray/auth_token (or RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH)"
            )
        else:
            hint = f"token from {token}; check that it is the cluster's token"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ClusterError(
            f"cannot join the Ray cluster at {address!r} (from {source}): {first}; {hint}"
        ) from None
