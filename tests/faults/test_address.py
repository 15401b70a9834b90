"""A stale ``RAY_ADDRESS`` / ``--address`` whose port another program took (K26, issue 11).

Nothing listening, a URL and a Ray Client address are covered in tests/integration/test_join.py.
Here something *does* listen: a silent TCP server, an HTTP server. ``ray.init`` would retry for
ever there (a warning every 30 s); Kestrel asks the address for a Ray head's first answer and
fails within seconds (``CONNECT_TIMEOUT``, 5 s), in one line naming the address and where it
came from; ``kestrel launch`` calls the check before ``ray.init`` (test_join.py's K26 launch).
"""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

import kestrel_ray.cluster._start
from kestrel_ray._errors import ClusterError
from kestrel_ray.cluster._start import check_address

pytestmark = pytest.mark.faults


@pytest.fixture
def silent_port():
    """A port where a TCP server accepts connections and never says a word."""
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.fixture
def http_port():
    """A port where an HTTP/1 server answers (e.g. a web app that took a dead head's port)."""
    server = http.server.HTTPServer(("0.0.0.0", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.parametrize("server", ["silent_port", "http_port"])
def test_k26_a_port_that_is_not_a_ray_head_is_refused_in_one_line(server, request, monkeypatch):
    monkeypatch.setattr(kestrel_ray.cluster._start, "CONNECT_TIMEOUT", 1.0)  # 5 s by default
    address = f"127.0.0.1:{request.getfixturevalue(server)}"
    start = time.monotonic()
    with pytest.raises(ClusterError) as info:
        check_address(address, "--address")  # what init_ray (kestrel launch) calls first
    assert time.monotonic() - start < 3
    text = str(info.value)
    assert f"no Ray cluster at '{address}' (from --address): something listens there" in text
    assert "\n" not in text


def test_a_live_ray_head_passes_the_check(ray_session):
    import ray

    start = time.monotonic()
    check_address(ray.get_runtime_context().gcs_address, "RAY_ADDRESS")  # token auth: answers
    assert time.monotonic() - start < 2
