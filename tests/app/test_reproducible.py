"""A simulator that ignores its ``rng`` is named by the dry run and ``kestrel simulate``."""

import warnings

import numpy as np
import pytest

from kestrel.cli import main
from kestrel.preflight._dryrun import dry_run
from kestrel_core import Graph
from kestrel_core._errors import ReproducibilityWarning

PRIOR = {"_target_": "kestrel_core.Product", "priors": [["uniform", 0, 1], ["uniform", 0, 1]]}
CALLS = {"n": 0}


class OwnRng:
    """Draws from its own generator: --seed cannot reproduce it."""

    def simulate_batch(self, n, theta, rng=None):
        CALLS["n"] += n
        return theta + np.random.default_rng().standard_normal(theta.shape)


class GlobalNumpy:
    """Draws from numpy's global state."""

    def simulate_batch(self, n, theta, rng=None):
        return theta + np.random.standard_normal(theta.shape)


class UsesRng:
    """Two draws per call: its first row depends on n, but it is reproducible."""

    def simulate_batch(self, n, theta, rng):
        CALLS["n"] += n
        scale = rng.uniform(size=(n, 1))
        return theta * scale + rng.standard_normal(theta.shape)


class PerSample:
    def simulate(self, theta, rng):
        return theta + rng.standard_normal(theta.shape)


class NoNoise:
    def simulate_batch(self, n, theta):
        return 2 * theta


def graph(cls, **node):
    return (
        Graph()
        .add_node("theta", PRIOR)
        .add_node("x", {"_target_": f"{__name__}.{cls}"}, parents=["theta"], **node)
    )


def message(cls):
    return (
        f"node 'x' ({__name__}.{cls}) is not reproducible for a fixed rng: draw its noise from "
        "the rng argument (simulate_batch(n, theta, rng)) so that --seed reproduces a run"
    )


@pytest.mark.parametrize("cls", ["OwnRng", "GlobalNumpy"])
def test_a_simulator_ignoring_its_rng_is_warned_once_by_the_dry_run(cls):
    with pytest.warns(ReproducibilityWarning) as caught:
        dry_run(graph(cls))
    assert [str(w.message) for w in caught] == [message(cls)]


@pytest.mark.parametrize("cls", ["UsesRng", "PerSample", "NoNoise"])
def test_a_simulator_drawing_from_its_rng_or_without_noise_is_not_warned(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dry_run(graph(cls))


def test_the_check_costs_at_most_two_samples_beyond_the_dry_run():
    CALLS["n"] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dry_run(graph("UsesRng"))
    assert CALLS["n"] == 2 + 2  # the dry run's two draws, then at most two single samples
    CALLS["n"] = 0
    with pytest.warns(ReproducibilityWarning):
        dry_run(graph("OwnRng"))
    assert CALLS["n"] == 2 + 2


def test_a_node_with_dry_run_false_is_not_checked():
    CALLS["n"] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dry_run(graph("OwnRng", dry_run=False))
    assert CALLS["n"] == 0


def own_rng_config(folder, nodes=("x",)):
    """``folder/config.yml``: a uniform prior and one :class:`OwnRng` node per name."""
    cfg = folder / "config.yml"
    text = (
        "graph:\n"
        "  theta:\n"
        "    simulator: {_target_: kestrel_core.Product, priors: [[uniform, 0, 1]]}\n"
    )
    for node in nodes:
        text += f"  {node}:\n    simulator: {{_target_: {__name__}.OwnRng}}\n    parents: [theta]\n"
    cfg.write_text(text)
    return cfg


def test_kestrel_simulate_with_a_seed_warns_for_a_simulator_ignoring_its_rng(tmp_path, capsys):
    cfg = own_rng_config(tmp_path)
    with pytest.warns(ReproducibilityWarning, match="node 'x'"):
        status = main(["simulate", "-c", str(cfg), "-n", "4", "-o", str(tmp_path / "s.npz")])
    assert status == 0
