"""A simulator that ignores its ``rng`` is named by the dry run and ``kestrel simulate``."""

import warnings
from pathlib import Path

import numpy as np
import pytest

from kestrel.cli import main
from kestrel.preflight._dryrun import dry_run
from kestrel_core import Graph, load_config
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


class SeededNoNoise:
    """Deterministic, though it takes an rng (and even builds a seeded generator)."""

    def __init__(self, seed=42):
        self.seed = seed

    def simulate_batch(self, n, theta, rng=None):
        CALLS["n"] += n
        np.random.default_rng(self.seed)  # unused
        return 2 * theta


class SeedsItself:
    """K43: ignores the rng it is given and seeds its own generator from its config."""

    def __init__(self, seed=42, sigma=0.1):
        self.seed, self.sigma = int(seed), float(sigma)

    def simulate_batch(self, n, theta, rng=None):
        own = np.random.default_rng(self.seed)
        return theta + self.sigma * own.standard_normal(theta.shape)


class SeedsItselfNoRng(SeedsItself):
    """As :class:`SeedsItself`, without an rng parameter at all (Kestrel passes none)."""

    def simulate_batch(self, n, theta):
        return super().simulate_batch(n, theta)


class SeededRoot:
    """A root that seeds itself: every replica draws the same values."""

    def simulate_batch(self, n, rng=None):
        return np.random.default_rng(42).standard_normal((n, 2))


class SeededOnce:
    """Seeds its generator once, at construction: each replica repeats the others' draws."""

    def __init__(self):
        self.own = np.random.default_rng(42)

    def simulate_batch(self, n, theta, rng=None):
        return theta + self.own.standard_normal(theta.shape)


class CoinFlip:
    """Draws from the rng, but has two outputs only (often equal under two rngs)."""

    def simulate_batch(self, n, theta, rng):
        return (rng.random((n, 1)) < 0.5).astype(float)


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


@pytest.mark.parametrize("cls", ["UsesRng", "PerSample", "NoNoise", "SeededNoNoise", "CoinFlip"])
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
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dry_run(graph("SeededNoNoise"))
    assert CALLS["n"] == 2 + 1 + 2  # one that never draws: one sample, then two on one θ
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


# -- K43: a simulator that seeds its own generator repeats its noise on every replica ----------


def same_message(cls, node="x"):
    return (
        f"node {node!r} ({__name__}.{cls}) returns the same output for different rngs although "
        "its samples are random: it draws its noise from a generator seeded in its own code or "
        "config, so its replicas (num_actors) and rounds repeat each other's noise; draw the "
        "noise from the rng argument (simulate_batch(n, theta, rng)), which Kestrel seeds "
        "differently for every call from --seed"
    )


@pytest.mark.parametrize("cls", ["SeedsItself", "SeedsItselfNoRng"])
def test_k43_a_simulator_seeding_itself_is_warned_by_the_dry_run(cls):
    """``default_rng(42)`` from its config, 4 replicas: the dry run names it before Ray starts."""
    spec = {"_target_": f"{__name__}.{cls}", "seed": 42}
    g = Graph().add_node("theta", PRIOR).add_node("x", spec, parents=["theta"], num_actors=4)
    with pytest.warns(ReproducibilityWarning) as caught:
        dry_run(g)
    assert [str(w.message) for w in caught] == [same_message(cls)]


def test_k43_a_root_seeding_itself_is_warned_by_the_dry_run():
    with pytest.warns(ReproducibilityWarning) as caught:
        dry_run(Graph().add_node("z", {"_target_": f"{__name__}.SeededRoot"}, num_actors=4))
    assert [str(w.message) for w in caught] == [same_message("SeededRoot", "z")]


def test_k43_a_simulator_seeded_at_construction_is_warned_by_the_dry_run():
    """Its draws move on from call to call, so one seed does not give one output."""
    with pytest.warns(ReproducibilityWarning) as caught:
        dry_run(graph("SeededOnce", num_actors=4))
    assert [str(w.message) for w in caught] == [message("SeededOnce")]


def test_k43_kestrel_simulate_warns_for_a_simulator_seeding_itself(tmp_path):
    cfg = tmp_path / "config.yml"
    cfg.write_text(
        "graph:\n"
        "  theta:\n"
        "    simulator: {_target_: kestrel_core.Product, priors: [[uniform, 0, 1]]}\n"
        "  x:\n"
        f"    simulator: {{_target_: {__name__}.SeedsItself, seed: 42}}\n"
        "    parents: [theta]\n"
        "    num_actors: 4\n"
    )
    with pytest.warns(ReproducibilityWarning) as caught:
        status = main(["simulate", "-c", str(cfg), "-n", "8", "-o", str(tmp_path / "s.npz")])
    assert status == 0
    assert [str(w.message) for w in caught] == [same_message("SeedsItself")]


#: simulators of kestrel_core.testing.models that run on a uniform θ of shape (2,) (or as roots)
TESTING_NODES = {
    "Gauss": ([], {"dim": 2}),
    "GaussPrior": ([], {"dim": 2}),
    "Needs": ([], {"scale": 3.0}),
    "Counting": ([], {}),
    "Shift": (["theta"], {"offset": 1.0}),
    "Noise": (["theta"], {"sigma": 0.1}),
    "PerSample": (["theta"], {}),
    "Scalar": (["theta"], {}),
    "Megabyte": (["theta"], {}),
}


@pytest.mark.parametrize("name", sorted(TESTING_NODES))
def test_k43_no_testing_model_is_warned(name):
    parents, kwargs = TESTING_NODES[name]
    spec = {"_target_": f"kestrel_core.testing.models.{name}", **kwargs}
    g = Graph().add_node("theta", PRIOR).add_node("x", spec, parents=parents, num_actors=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dry_run(g)


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*/*.yml"))


@pytest.mark.parametrize("config", EXAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in EXAMPLES])
def test_k43_no_example_model_is_warned(config):
    cfg = load_config(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibilityWarning)
        dry_run(cfg.graph)


def launch_config(tmp_path, simulator):
    """θ ~ U(0, 1)², x from ``simulator`` on 4 replicas, observed; a Gaussian estimator."""
    obs = tmp_path / "obs.npy"
    np.save(obs, np.array([0.4, 0.6]))
    return {
        "buffer": {"min_samples": 64, "max_samples": 128, "validation_samples": 16},
        "graph": {
            "theta": {
                "simulator": PRIOR,
                "evidence": ["x"],
                "estimator": {"_target_": "kestrel_torch.GaussianPosterior", "max_epochs": 2},
            },
            "x": {
                "simulator": simulator,
                "parents": ["theta"],
                "observed": str(obs),
                "num_actors": 4,
            },
        },
    }


def test_k43_a_launch_warns_before_it_starts_ray(tmp_path):
    """Every launch (new, resumed) dry-runs its simulators in the driver before Ray starts."""
    from kestrel.session._session import RunSession

    config = launch_config(tmp_path, {"_target_": f"{__name__}.SeedsItself", "seed": 42})
    with pytest.warns(ReproducibilityWarning) as caught:
        RunSession.for_launch(config, tmp_path / "run", seed=1)
    assert [str(w.message) for w in caught] == [same_message("SeedsItself")]
    assert not (tmp_path / "run").exists()  # before anything is written
    config = launch_config(tmp_path, {"_target_": "kestrel_core.testing.models.Noise"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RunSession.for_launch(config, tmp_path / "run", seed=1)
