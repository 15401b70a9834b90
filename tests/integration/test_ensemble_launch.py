"""Issue 31 item 2: ``ensemble: 2`` — two members trained at once, each in its own actor.

One deterministic toy launch (the ``test_launch`` toy: z ~ U(0, 1)², x = z + N(0, 0.05²), a
Gaussian estimator, 3 epochs) on the session's Ray serves every test: both members trained (with their
own seeds), the run's ``estimator.pt`` holds both, and the run's posterior — draws and
``log_prob`` — is their mixture, the same through ``kestrel sample`` and ``kestrel.open_run``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import yaml

import kestrel
from kestrel import open_run, sample_run
from kestrel_core import EstimatorContext, Product
from kestrel_torch import EnsemblePosterior, GaussianPosterior
from kestrel_torch.estimators._ensemble import unpack_members

from .test_launch import toy

PRIOR = Product([["uniform", 0.0, 1.0]] * 2)

ESTIMATOR = {
    "_target_": "kestrel_torch.GaussianPosterior",
    "max_epochs": 3,
    "ensemble": 2,
}


@pytest.fixture(scope="module")
def launched(tmp_path_factory, ray_session):
    """``kestrel.launch`` of the toy with a 2-member ensemble, each member's actor asking for
    half a CPU (the session's Ray has 2)."""
    tmp = tmp_path_factory.mktemp("ensemble")
    cfg = toy(tmp, estimator=ESTIMATOR)
    cfg["graph"]["z"]["ray"] = {"num_cpus": 0.5}
    config = tmp / "config.yml"
    config.write_text(yaml.safe_dump(cfg))
    # deterministic: resimulation rounds at fixed epochs, so the short launch draws proposals
    # from the ensemble (each row from one member's actor)
    result = kestrel.launch(
        str(config), str(tmp / "run"), seed=11, auto_sample=False, deterministic=True
    )
    assert result.status == "completed", result
    return tmp / "run"


def members(folder) -> list[GaussianPosterior]:
    """The members of the run's ensemble, each loaded into its own estimator."""
    with open(os.path.join(folder, "graph", "z", "estimator.pt"), "rb") as f:
        blobs = unpack_members(f.read())
    assert blobs is not None and len(blobs) == 2
    out = []
    for blob in blobs:
        est = GaussianPosterior(max_epochs=3)
        est.setup(EstimatorContext(node="z", prior=PRIOR, evidence=("x",), seed=0))
        est.load_bytes(blob)
        out.append(est)
    return out


def test_both_members_trained_with_their_own_seeds(launched):
    with np.load(launched / "buffer" / "snapshots" / "buffer.npz") as f:
        log_prob = f["z.log_prob"]
    proposed = np.abs(log_prob) > 1e-9  # the prior's log density is 0 on U(0, 1)²
    assert proposed.any() and np.isfinite(log_prob).all()  # rows of the ensemble's proposal
    a, b = members(launched)
    assert a.total_epochs >= 1 and b.total_epochs >= 1
    theta = np.array([[0.4, 0.6], [0.3, 0.5]])
    # other seeds, other weights: the two members are not copies of one another
    assert not np.allclose(a.log_prob(theta, {"x": theta}), b.log_prob(theta, {"x": theta}))


def test_the_posterior_is_the_weighted_mixture_of_both(launched):
    run = open_run(launched)
    a, b = members(launched)
    mixture = EnsemblePosterior([a, b])
    assert mixture.weights.sum() == pytest.approx(1.0) and np.all(mixture.weights > 0)
    theta = np.array([[0.4, 0.6], [0.45, 0.55], [0.35, 0.62]])
    x = {"x": np.array([[0.4, 0.6]])}
    got = run.posterior.log_prob(theta)
    np.testing.assert_allclose(got, mixture.log_prob(theta, x), rtol=1e-9)
    assert not np.allclose(got, a.log_prob(theta, x))  # not member 0 alone
    status = run.posterior._local().estimator("z").status()
    np.testing.assert_allclose(status["ensemble"]["weights"], mixture.weights)


def test_kestrel_sample_and_open_run_agree_for_a_seed(launched):
    written = sample_run(launched, "posterior", n=300, seed=7)
    drawn = open_run(launched).posterior.sample(300, seed=7)["z"]
    with np.load(written.path) as f:
        np.testing.assert_array_equal(drawn, f["z"])
    assert np.all((drawn > 0) & (drawn < 1)) and np.all(np.abs(drawn.mean(0) - [0.4, 0.6]) < 0.1)


def test_on_ray_the_members_actors_draw_the_same_mixture(launched):
    # --ray: the node's actor and its member's actor load the two members; the posterior is
    # the same mixture as in this process (the launch itself drew its proposals on Ray)
    here = sample_run(launched, "posterior", n=200, seed=4)
    on_ray = sample_run(launched, "posterior", n=200, seed=4, ray=True)
    assert on_ray.ray and not here.ray
    with np.load(here.path) as a, np.load(on_ray.path) as b:
        np.testing.assert_allclose(a["z"], b["z"], rtol=1e-6, atol=1e-9)
