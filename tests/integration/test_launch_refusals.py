"""A launch refuses a config or argument error before it writes anything (K17), and a failed
launch always records its reason in run.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
import ray

from kestrel import RunDir, launch
from kestrel.session._session import RunSession
from kestrel_core import ConfigError
from kestrel_core.store import BufferSnapshot, write_buffer_file
from kestrel_ray._errors import ClusterError

from .test_launch import toy
from .test_rundir import contents


def a_run(tmp_path, rows: bool = True) -> RunDir:
    """A run written by a launch that ended at once; with ``rows``, a saved buffer file."""
    run = RunDir(tmp_path / "run")
    session = RunSession.for_launch(toy(tmp_path), run.root, seed=4)
    session.create()
    session.end_launch(None)
    if rows:  # a readable snapshot (a damaged one is refused: K40)
        empty = BufferSnapshot({}, np.zeros(0, np.int64), np.zeros(0, np.int8), 0)
        write_buffer_file(tmp_path / "run" / "buffer" / "snapshots", empty)
    return run


@pytest.mark.parametrize(
    ("overrides", "address", "error", "match"),
    [
        (["graph.z.timeout=5"], None, ConfigError, "a timeout applies to simulator nodes"),
        (["graph.z.num_actors=2"], None, ConfigError, "cannot be multiplexed"),
        ([], "http://127.0.0.1:1", ClusterError, "is a URL"),
        ([], "nohost", ClusterError, "cannot read the Ray address"),
        (["ray.address=ray://h:1"], None, ClusterError, "Ray Client"),
    ],
)
def test_k17_config_and_argument_errors_write_nothing(
    overrides, address, error, match, tmp_path, monkeypatch
):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # an address is ignored by a Ray already running in this process (another test's)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    new = tmp_path / "new"
    with pytest.raises(error, match=match):
        launch(toy(tmp_path), new, overrides=overrides, address=address, progress=False)
    assert not new.exists()  # a new run: no folder at all
    run = a_run(tmp_path, rows=False)
    before = contents(run.root)
    with pytest.raises(error, match=match):
        launch(None, run.root, overrides=overrides, address=address, mode="resume")
    assert contents(run.root) == before  # an existing run: nothing changed


def test_a_failed_launch_always_records_a_reason(tmp_path, monkeypatch):
    def fails(self, *args, **kwargs):
        raise ClusterError("no Ray cluster at '127.0.0.1:1' (from --address): refused")

    monkeypatch.setattr(RunSession, "ray", fails)
    with pytest.raises(ClusterError):
        launch(toy(tmp_path), tmp_path / "run", seed=1, progress=False)
    (entry,) = json.loads((tmp_path / "run" / "run.json").read_text())["launches"]
    assert entry["status"] == "failed"
    assert (
        entry["reason"] == "ClusterError: no Ray cluster at '127.0.0.1:1' (from --address): refused"
    )
