"""Joining a Ray cluster: token sources, addresses that cannot work (one line, within seconds)."""

from __future__ import annotations

import socket
import time

import pytest

from kestrel_ray._errors import ClusterError
from kestrel_ray.cluster._start import check_address, token_source

from .helpers import example, kestrel_env, run_kestrel, tiny


def test_token_sources_follow_rays_precedence(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    assert token_source({}, home) is None
    (home / ".ray" / "auth_token").write_text("abc\n")
    assert token_source({}, home) == str(home / ".ray" / "auth_token")
    named = tmp_path / "token"
    named.write_text("def")
    assert (
        token_source({"RAY_AUTH_TOKEN_PATH": str(named)}, home) == f"RAY_AUTH_TOKEN_PATH ({named})"
    )
    # a named file that is missing is not silently replaced by the default one
    assert token_source({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}, home) is None
    assert (
        token_source({"RAY_AUTH_TOKEN": "xyz", "RAY_AUTH_TOKEN_PATH": str(named)}, home)
        == "RAY_AUTH_TOKEN"
    )
    (home / ".ray" / "auth_token").write_text("  \n")  # empty: no token
    assert token_source({}, home) is None


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.mark.parametrize(
    "address, expected",
    [
        ("ray://10.0.0.1:10001", "Ray Client addresses are not supported"),
        ("http://127.0.0.1:8265", "is a URL"),
        ("10.0.0.1", "expected host:port"),
    ],
)
def test_addresses_that_cannot_work_are_refused_in_one_line(address, expected):
    with pytest.raises(ClusterError, match=expected) as info:
        check_address(address, "RAY_ADDRESS")
    assert "(from RAY_ADDRESS)" in str(info.value) and "\n" not in str(info.value)


def test_nothing_listening_is_refused_at_once():
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(
        ClusterError, match=r"no Ray cluster at .* \(from --address\): connection refused"
    ):
        check_address(address, "--address")
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("scheme", ["", "http://"])
def test_k26_stale_ray_address_fails_within_30_s_in_one_line(tmp_path, scheme):
    address = f"{scheme}127.0.0.1:{_closed_port()}"
    config = example("01_minimal")
    start = time.monotonic()
    done = run_kestrel(
        "launch",
        "-c",
        config,
        "-o",
        tmp_path / "run",
        "--timeout",
        "60",
        *tiny(config),
        timeout=120,
        env=kestrel_env(RAY_ADDRESS=address),
    )
    elapsed = time.monotonic() - start
    assert done.returncode != 0
    assert elapsed < 30, f"took {elapsed:.0f} s"
    err = done.stderr.strip()
    assert "Traceback" not in err
    assert address in err and "RAY_ADDRESS" in err, err
    assert len(err.splitlines()) == 1, err
