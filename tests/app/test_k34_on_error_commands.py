"""``on_error: skip`` in ``kestrel simulate`` (in-process forward sampling) and the NaN note (K34)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kestrel.cli import main
from kestrel_core import Graph, SimulatorError
from kestrel_core.execute._forward import sample_forward
from kestrel_core.execute._onerror import SkipLog, nonfinite_counts

FRAGILE = "tests.core.blame_models.Fragile"


class HalfNaN:
    """``x = theta``, NaN in the first component where ``theta[0] < 0``."""

    def simulate_batch(self, n, theta, rng=None):
        x = np.array(theta, dtype=float)
        x[x[:, 0] < 0, 0] = np.nan
        return x


def graph(target=FRAGILE, on_error="skip", **kwargs):
    g = Graph().add_node(
        "theta", {"_target_": "kestrel_core.Product", "priors": [["uniform", 0.0, 2.22]] * 2}
    )
    return g.add_node("x", {"_target_": target, **kwargs}, parents=["theta"], on_error=on_error)


def config(tmp_path, target=FRAGILE, on_error="skip"):
    np.save(tmp_path / "obs.npy", np.array([1.0, 0.5]))
    x = {"simulator": {"_target_": target}, "parents": ["theta"], "observed": "obs.npy"}
    if on_error:
        x["on_error"] = on_error
    prior = {"_target_": "kestrel_core.Product", "priors": [["uniform", -1.0, 2.22]] * 2}
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"graph": {"theta": {"simulator": prior}, "x": x}}))
    return path


def test_k34_sample_forward_drops_and_counts_the_samples_that_raised():
    skipped = SkipLog()
    trace = sample_forward(graph(), 400, seed=3, chunk_size=50, skipped=skipped)
    kept = len(trace["x.value"])
    assert 0 < skipped.errors["x"] == 400 - kept < 0.3 * 400
    assert (trace["theta.value"][:, 0] <= 2.0).all() and np.isfinite(trace["x.value"]).all()
    assert "theta[0] > 2.0" in skipped.error["x"][0]
    assert skipped.line(400) == (
        f"dropped {400 - kept} of 400 samples whose simulation raised (on_error: skip): "
        f"{{'x': {400 - kept}}}"
    )
    # without a log the rows stay, NaN-filled, as on Ray; the same draws either way
    full = sample_forward(graph(), 400, seed=3, chunk_size=50)
    bad = np.isnan(full["x.value"]).all(axis=1)
    assert bad.sum() == 400 - kept
    np.testing.assert_array_equal(full["x.value"][~bad], trace["x.value"])


def test_k34_sample_forward_raises_by_default_and_when_every_sample_raises():
    with pytest.raises(ValueError, match=r"theta\[0\] > 2.0"):
        sample_forward(graph(on_error="raise"), 200, seed=3)
    with pytest.raises(SimulatorError, match="raised on all 20 samples of the call"):
        sample_forward(graph(limit=-1.0), 20, seed=3, skipped=SkipLog())


def test_k34_on_error_skip_in_kestrel_simulate(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "-c", str(config(tmp_path)), "-n", "300", "-o", "sim.npz"]) == 0
    out, err = capsys.readouterr()
    with np.load(tmp_path / "sim.npz") as data:
        kept = len(data["x"])
        assert kept < 300 and np.isfinite(data["x"]).all()
    assert f"kestrel simulate: {kept} samples" in out
    assert (
        f"  dropped {300 - kept} of 300 samples whose simulation raised (on_error: skip): "
        f"{{'x': {300 - kept}}}"
    ) in out
    assert "kestrel simulate: node x: skipping samples whose simulation raises" in err
    assert "blame_models.py" in err and "ValueError: theta[0] > 2.0" in err
    assert "note:" not in out


def test_k34_kestrel_simulate_stops_without_on_error_skip(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = config(tmp_path, on_error=None)
    assert main(["simulate", "-c", str(path), "-n", "300", "-o", "sim.npz"]) == 1
    assert "theta[0] > 2.0" in capsys.readouterr().err
    assert not (tmp_path / "sim.npz").exists()


def test_k34_kestrel_simulate_notes_the_samples_holding_nan(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = f"{__name__}.HalfNaN"
    path = config(tmp_path, target=target, on_error=None)
    assert main(["simulate", "-c", str(path), "-n", "200", "-o", "sim.npz"]) == 0
    out = capsys.readouterr().out
    with np.load(tmp_path / "sim.npz") as data:
        assert len(data["x"]) == 200  # kept: NaN rows are the user's values
        count = int(np.isnan(data["x"]).any(axis=1).sum())
    assert count > 0
    assert f"  note: samples holding NaN or ±inf per node (kept, of 200): {{'x': {count}}}" in out
    assert "dropped" not in out


def test_k34_nonfinite_counts_per_node_and_for_a_batch():
    a = np.zeros((2, 3, 2))
    a[1, 2, 0] = np.inf
    ints = np.zeros((3, 2), dtype=int)
    assert nonfinite_counts({"x": a, "k": ints}, lead=2) == {"x": 1}
    assert nonfinite_counts({"x": a[1]}) == {"x": 1}
