"""Embeddings: identity, ``_input_``, scaffolds, nested targets, copies and checkpoints (K13 K17)."""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from kestrel_core import ConfigError, EstimatorError
from kestrel_torch import Embedding, RunningNorm, build_embedding
from kestrel_torch.embeddings import Concatenate, Flatten, SignalProjection

from .torchtest_helpers import BasisEmbedding, Recorder, Wrapped


def target(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_identity_concatenates_flattened_evidence_in_order():
    emb = build_embedding(None, ["x", "y"], ["mu"])
    x, y = torch.randn(4, 2, 3), torch.randn(4, 5)
    out = emb({"y": y, "x": x, "mu": torch.randn(4, 7)})
    assert out.shape == (4, 11) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.cat([x.reshape(4, 6), y], dim=1))
    torch.testing.assert_close(emb({"x.value": x, "y.value": y}), out)  # flat keys work too


def test_identity_keeps_float64_and_broadcasts_leading_one():
    emb = build_embedding(None, ["x", "obs"])
    x = torch.randn(5, 2, dtype=torch.float64)
    obs = torch.arange(3, dtype=torch.int64)[None]  # a broadcast observation (1, 3)
    out = emb({"x": x, "obs": obs})
    assert out.dtype == torch.float64 and out.shape == (5, 5)
    torch.testing.assert_close(out[:, 2:], torch.arange(3.0, dtype=torch.float64).expand(5, 3))
    with pytest.raises(EstimatorError, match="leading dimensions"):
        emb({"x": x, "obs": torch.zeros(2, 3)})


def test_missing_evidence_is_an_error():
    with pytest.raises(EstimatorError, match=r"'x' \(evidence\) is missing"):
        build_embedding(None, ["x"])({"y": torch.zeros(2, 1)})


def test_input_order_and_scaffold_none_at_inference():
    spec = {"_target_": target(Recorder), "_input_": ["mu", "x"], "scale": 2.0}
    emb = build_embedding(spec, ["x"], ["mu"])
    assert isinstance(emb, Embedding) and emb.inputs == ("mu", "x")
    x, mu = torch.randn(3, 4), torch.randn(3, 2)
    torch.testing.assert_close(emb({"x": x, "mu": mu}), torch.cat([mu, x], dim=1) * 2.0)
    assert emb.net.seen == [(3, 2), (3, 4)]
    out = emb({"x": x})  # inference: no scaffold
    assert emb.net.seen == [None, (3, 4)]
    torch.testing.assert_close(out, x * 2.0)
    emb({"x": x, "mu": None})
    assert emb.net.seen == [None, (3, 4)]


def test_input_defaults_to_all_evidence_and_accepts_a_single_name():
    emb = build_embedding({"_target_": target(Recorder)}, ["x", "y"], ["mu"])
    assert emb.inputs == ("x", "y")
    assert build_embedding({"_target_": target(Recorder), "_input_": "y"}, ["x", "y"]).inputs == (
        "y",
    )


def test_unknown_input_names_the_key_path():
    spec = {"_target_": target(Recorder), "_input_": ["x", "muu"]}
    with pytest.raises(
        ConfigError, match=r"^estimator\.embedding\._input_\[1\]: 'muu' .*did you mean 'mu'"
    ):
        build_embedding(spec, ["x"], ["mu"])
    with pytest.raises(
        ConfigError, match=r"estimator\.embedding\._input_\[0\]: expected a node name"
    ):
        build_embedding({"_target_": target(Recorder), "_input_": [3]}, ["x"])
    with pytest.raises(ConfigError, match=r"estimator\.embedding: missing '_target_'"):
        build_embedding({"_input_": ["x"]}, ["x"])
    with pytest.raises(ConfigError, match=r"estimator\.embedding\.inner\._input_"):
        build_embedding(
            {
                "_target_": target(Wrapped),
                "inner": {"_target_": target(Recorder), "_input_": ["x"]},
            },
            ["x"],
        )


def test_nested_targets_are_instantiated():
    spec = {
        "_target_": target(Wrapped),
        "_input_": ["x"],
        "inner": {"_target_": "torch.nn.Linear", "in_features": 3, "out_features": 2},
        "extras": [{"_target_": "kestrel_torch.RunningNorm", "momentum": 0.5}],
        "offset": 1.0,
    }
    emb = build_embedding(spec, ["x"])
    assert isinstance(emb.net.inner, torch.nn.Linear) and isinstance(emb.net.extras[0], RunningNorm)
    x = torch.randn(4, 3)
    torch.testing.assert_close(emb({"x": x}), emb.net.inner(x) + 1.0)


def test_k17_misspelt_embedding_keyword_is_named_with_a_suggestion():
    with pytest.raises(
        ConfigError,
        match=r"^estimator\.embedding\.scal: unexpected argument \(did you mean 'scale'\?\)",
    ):
        build_embedding({"_target_": target(Recorder), "scal": 2.0}, ["x"])
    with pytest.raises(ConfigError, match=r"missing required argument 'n_components'"):
        build_embedding({"_target_": target(SignalProjection)}, ["x"])


def test_constructor_errors_keep_the_original_text():
    message = r"estimator\.embedding\._target_: building .*Linear.*TypeError: .*"
    with pytest.raises(ConfigError, match=message):
        build_embedding(
            {"_target_": "torch.nn.Linear", "in_features": "3", "out_features": 2}, ["x"]
        )
    with pytest.raises(ConfigError, match="expected a torch.nn.Module"):
        build_embedding({"_target_": "fractions.Fraction", "numerator": 1}, ["x"])
    with pytest.raises(ConfigError, match="expected null, a mapping"):
        build_embedding("model.E", ["x"])


def test_module_instance_is_fed_all_evidence():
    emb = build_embedding(Flatten(), ["x"])
    assert emb({"x": torch.ones(2, 3, 4)}).shape == (2, 12)
    cat = build_embedding(Concatenate(), ["x"], ["mu"])
    assert cat({"x": torch.ones(2, 3)}).shape == (2, 3)


def test_k13_plain_attribute_state_survives_copies():
    emb = build_embedding({"_target_": target(BasisEmbedding), "_input_": ["x"], "k": 2}, ["x"])
    best = copy.deepcopy(emb)  # the best-model copy is taken before the basis exists
    x = torch.randn(64, 5, dtype=torch.float64) * torch.tensor(
        [5.0, 3.0, 0.1, 0.1, 0.1], dtype=torch.float64
    )
    emb.train()
    emb({"x": x})
    assert emb.net.basis is not None and best.net.basis is None
    best.load_state_dict(emb.state_dict())  # what "copy into the best model" does
    torch.testing.assert_close(best.net.basis, emb.net.basis)
    clone = copy.deepcopy(emb)
    torch.testing.assert_close(clone.net.basis, emb.net.basis)
    assert clone.net.basis.data_ptr() != emb.net.basis.data_ptr()
    emb.eval()
    best.eval()
    torch.testing.assert_close(best({"x": x}), emb({"x": x}))


def test_k13_extra_state_loads_in_a_new_process(tmp_path):
    spec = {"_target_": target(BasisEmbedding), "_input_": ["x"], "k": 3}
    emb = build_embedding(spec, ["x"])
    x = torch.randn(32, 6, dtype=torch.float64)
    emb({"x": x})
    emb.eval()
    torch.save(emb.state_dict(), tmp_path / "embedding.pt")
    torch.save(x, tmp_path / "x.pt")
    expected = emb({"x": x})
    script = textwrap.dedent(f"""
        import torch
        from kestrel_torch import build_embedding
        emb = build_embedding({spec!r}, ["x"])
        emb.load_state_dict(torch.load({str(tmp_path / "embedding.pt")!r}, weights_only=True, map_location="cpu"))
        emb.eval()
        x = torch.load({str(tmp_path / "x.pt")!r}, weights_only=True)
        torch.save(emb({{"x": x}}), {str(tmp_path / "out.pt")!r})
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)
    got = torch.load(tmp_path / "out.pt", weights_only=True)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def subspace_overlap(basis: torch.Tensor, phi: torch.Tensor) -> float:
    """Sum of squared cosines of the principal angles between span(phi) and span(basis)."""
    q, _ = torch.linalg.qr(phi)
    return float(torch.linalg.matrix_norm(basis.T @ q) ** 2)


def test_signal_projection_learns_the_signal_subspace():
    gen = torch.Generator().manual_seed(0)
    d, rank = 200, 3
    phi = torch.randn(d, rank, dtype=torch.float64, generator=gen)
    proj = SignalProjection(4, update_every=2)
    x0 = torch.randn(8, d, dtype=torch.float64, generator=gen)
    proj.eval()
    out0 = proj(x0)  # before any update: a random orthonormal basis, no state change
    assert out0.shape == (8, 4) and int(proj.calls) == 0
    torch.testing.assert_close(proj.basis.T @ proj.basis, torch.eye(4, dtype=torch.float64))
    assert subspace_overlap(proj.basis, phi) < 0.5

    proj.train()
    for _ in range(10):
        theta = torch.randn(64, rank, dtype=torch.float64, generator=gen)
        mu = theta @ phi.T
        x = mu + 0.1 * torch.randn(64, d, dtype=torch.float64, generator=gen)
        out = proj(x, mu)
    assert out.shape == (64, 4)
    assert subspace_overlap(proj.basis, phi) > rank - 1e-8
    torch.testing.assert_close(proj.basis.T @ proj.basis, torch.eye(4, dtype=torch.float64))

    fresh = SignalProjection(4, update_every=2)
    fresh.load_state_dict(proj.state_dict())
    fresh.eval()
    proj.eval()
    torch.testing.assert_close(fresh(x0), proj(x0))
    torch.testing.assert_close(copy.deepcopy(proj)(x0), proj(x0))
    state = copy.deepcopy(proj.state_dict())
    proj(x0)  # eval, no signal: nothing changes
    assert all(torch.equal(v, state[k]) for k, v in proj.state_dict().items())


def test_signal_projection_basis_is_stable_once_learned():
    gen = torch.Generator().manual_seed(1)
    phi = torch.randn(50, 3, dtype=torch.float64, generator=gen) * torch.tensor(
        [3.0, 2.0, 1.0], dtype=torch.float64
    )
    proj = SignalProjection(3, update_every=1)
    bases = []
    for _ in range(30):
        mu = torch.randn(128, 3, dtype=torch.float64, generator=gen) @ phi.T
        proj(mu, mu)
        bases.append(proj.basis.clone())
    assert float((bases[-1] - bases[-2]).abs().max()) < 0.05, (
        "refreshes must not flip or rotate the basis"
    )


def test_signal_projection_fitted_once_keeps_its_first_basis():
    """update_every=0: the basis of the first training call, as with an update_every no run
    reaches, and the moment is not accumulated after it."""
    gen = torch.Generator().manual_seed(2)
    phi = torch.randn(40, 3, dtype=torch.float64, generator=gen)
    batches = [torch.randn(32, 3, dtype=torch.float64, generator=gen) @ phi.T for _ in range(5)]
    once, never = SignalProjection(3, update_every=0), SignalProjection(3, update_every=10**9)
    for mu in batches:
        once(mu, mu)
        never(mu, mu)
        if int(once.calls) == 1:
            first = once.moment.clone()
    torch.testing.assert_close(once.basis, never.basis, rtol=0, atol=0)
    assert torch.equal(once.moment, first) and not torch.equal(never.moment, first)
    with pytest.raises(ValueError, match="update_every >= 0"):
        SignalProjection(3, update_every=-1)


def test_signal_projection_as_embedding_target_with_scaffold():
    spec = {
        "_target_": "kestrel_torch.embeddings.SignalProjection",
        "_input_": ["x", "mu"],
        "n_components": 2,
    }
    emb = build_embedding(spec, ["x"], ["mu"])
    x = torch.randn(16, 10, dtype=torch.float64)
    assert emb({"x": x, "mu": x}).shape == (16, 2)
    emb.eval()
    assert emb({"x": x}).shape == (16, 2)
    np.testing.assert_array_equal(emb.inputs, ["x", "mu"])


# -- K13/K29: a standard torch module gets its inputs in its own dtype ----------------------------


def test_k29_standard_torch_module_gets_float32_inputs():
    spec = {"_target_": "torch.nn.Linear", "in_features": 3, "out_features": 8}
    emb = build_embedding(spec, ["x"])
    out = emb({"x": torch.randn(5, 3, dtype=torch.float64)})
    assert out.shape == (5, 8) and out.dtype == torch.float32


def test_k29_float64_and_parameter_free_modules_keep_float64():
    double = Embedding(torch.nn.Linear(3, 2).double(), ["x"])
    assert double({"x": torch.randn(4, 3, dtype=torch.float64)}).dtype == torch.float64
    free = Embedding(torch.nn.Flatten(), ["x"])
    assert free({"x": torch.randn(4, 3, dtype=torch.float64)}).dtype == torch.float64
    norm = Embedding(RunningNorm(momentum=0.5), ["x"])  # float64 statistics do not count
    assert norm({"x": torch.randn(4, 3, dtype=torch.float64)}).dtype == torch.float64
    mixed = Embedding(torch.nn.Sequential(RunningNorm(momentum=0.5), torch.nn.Linear(3, 2)), ["x"])
    assert mixed({"x": torch.randn(4, 3, dtype=torch.float64)}).dtype == torch.float32
    assert mixed.net[0].mean.dtype == torch.float64


def test_k29_flow_posterior_trains_with_a_torch_linear_embedding():
    from kestrel_core import EstimatorContext, InMemoryStore, Product
    from kestrel_torch import FlowPosterior

    prior = Product([["uniform", -1.0, 1.0]] * 2)
    est = FlowPosterior(
        seed=0,
        max_epochs=1,
        embedding={"_target_": "torch.nn.Linear", "in_features": 3, "out_features": 8},
    )
    est.setup(EstimatorContext(node="theta", prior=prior, evidence=("x",), seed=1))
    rng = np.random.default_rng(0)
    theta = prior.sample(256, rng)
    store = InMemoryStore(min_samples=0, max_samples=256, validation_samples=64)
    block = {"theta.value": theta, "theta.log_prob": prior.log_prob(theta)}
    store.append({**block, "x.value": np.c_[theta, theta.sum(1)]}, 256)
    asyncio.run(est.train(store.view()))
    x = np.array([[0.1, 0.2, 0.3]])
    values = est.sample_posterior(20, {"x": x}, rng=np.random.default_rng(1))["value"]
    assert values.shape == (20, 2) and np.all(np.isfinite(values))


# -- K17: the embedding called on the dry run's rows before Ray starts ---------------------------


def test_k17_wrong_in_features_fails_in_check_conditions():
    from kestrel_torch import FlowPosterior

    est = FlowPosterior(
        embedding={"_target_": "torch.nn.Linear", "in_features": 4, "out_features": 8}
    )
    est.check_conditions(("x",), path="graph.theta.estimator")  # builds: no rows, no call
    with pytest.raises(ConfigError, match=r"graph\.theta\.estimator\.embedding: .*mat1"):
        est.check_conditions(("x",), path="graph.theta.estimator", rows={"x": np.ones((2, 3))})
    ok = FlowPosterior(
        embedding={"_target_": "torch.nn.Linear", "in_features": 3, "out_features": 8}
    )
    ok.check_conditions(("x",), path="graph.theta.estimator", rows={"x": np.ones((2, 3))})
