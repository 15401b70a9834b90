"""Issue 14 item 4: repeated prior entries, arithmetic resolvers, a correlated Gaussian prior."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kestrel_core import ConfigError, MultivariateNormal, OutOfSupportError, Product, load_config
from kestrel_core.config._resolvers import calc


def _graph(priors):
    return {
        "graph": {"theta": {"simulator": {"_target_": "kestrel_core.Product", "priors": priors}}}
    }


def _priors_of(cfg):
    return cfg.graph.nodes["theta"].simulator.kwargs["priors"]


# -- repeat -----------------------------------------------------------------------------------
def test_repeat_expands_one_entry_into_k_identical_ones():
    prior = Product([["normal", 0.0, 1.0, {"repeat": 10}], ["uniform", -1.0, 1.0]])
    assert prior.full_dim == prior.dim == 11
    assert prior.specs == [["normal", 0.0, 1.0]] * 10 + [["uniform", -1.0, 1.0]]
    z = prior.to_normal(prior.sample(5, np.random.default_rng(0)))
    assert z.shape == (5, 11)


def test_repeat_of_a_fixed_entry_leaves_the_latent_space():
    prior = Product([["fixed", 2.0, {"repeat": 3}], ["normal", 0.0, 1.0]])
    assert (prior.full_dim, prior.dim) == (4, 1)


@pytest.mark.parametrize(
    "entry, message",
    [
        (["normal", 0.0, 1.0, {"repeat": 0}], "priors[0]: repeat must be a positive integer"),
        (["normal", 0.0, 1.0, {"repeat": 2.5}], "priors[0]: repeat must be a positive integer"),
        (["normal", 0.0, 1.0, {"repeat": True}], "priors[0]: repeat must be a positive integer"),
        (["normal", 0.0, 1.0, {"times": 3}], "unknown entry option 'times'"),
        (["normal", 0.0, {"repeat": 3}], "normal takes 2 parameters"),
    ],
)
def test_a_bad_repeat_names_the_entry(entry, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Product([["uniform", 0.0, 1.0], entry][1:])


def test_repeat_in_a_yaml_config(tmp_path):
    path = tmp_path / "c.yml"
    path.write_text(
        "graph:\n  theta:\n    simulator:\n      _target_: kestrel_core.Product\n"
        "      priors:\n        - [normal, 0.0, 1.0, {repeat: 4}]\n"
    )
    cfg = load_config(path)
    assert Product(_priors_of(cfg)).dim == 4


# -- resolvers --------------------------------------------------------------------------------
def test_sqrt_exp_log_and_calc_resolve_in_config_values():
    cfg = load_config(
        _graph(
            [
                ["normal", "${log:1}", "${sqrt:0.1}"],
                ["uniform", "${calc:'-2 * pi'}", "${calc:'2*pi'}"],
                ["lognormal", "${exp:0}", "${calc:'sqrt(4) / 2 ** 2'}"],
            ]
        )
    )
    priors = _priors_of(cfg)
    assert priors[0] == ["normal", 0.0, math.sqrt(0.1)]
    assert priors[1] == ["uniform", -2 * math.pi, 2 * math.pi]
    assert priors[2] == ["lognormal", 1.0, 0.5]


def test_calc_sees_other_config_values_through_interpolation():
    cfg = load_config(
        _graph(
            [
                ["normal", 0.0, 0.25],
                ["normal", 0.0, "${calc:'sqrt(${graph.theta.simulator.priors[0][2]})'}"],
            ]
        )
    )
    assert _priors_of(cfg)[1][2] == 0.5


@pytest.mark.parametrize(
    "expression",
    ["__import__('os')", "().__class__", "open('x')", "x", "sqrt(x=1)", "[1, 2]", "'a' * 3"],
)
def test_calc_refuses_anything_but_arithmetic(expression):
    with pytest.raises(ConfigError, match="is not allowed|not an arithmetic expression"):
        calc(expression)


def test_a_failing_expression_names_the_key_path():
    with pytest.raises(ConfigError) as info:
        load_config(_graph([["normal", 0.0, "${calc:'1/0'}"]]))
    text = str(info.value)
    assert "graph.theta.simulator.priors[0][2]" in text and "1/0" in text


# -- MultivariateNormal -----------------------------------------------------------------------
MEAN = np.array([1.0, -2.0, 0.5])
COV = np.array([[2.0, 0.6, 0.1], [0.6, 1.0, -0.3], [0.1, -0.3, 0.5]])


def test_mvnormal_log_prob_is_the_gaussian_density():
    prior = MultivariateNormal(MEAN, COV)
    x = np.random.default_rng(1).normal(size=(7, 3))
    diff = x - MEAN
    quad = np.einsum("ni,ij,nj->n", diff, np.linalg.inv(COV), diff)
    expected = -0.5 * (quad + np.log(np.linalg.det(COV)) + 3 * np.log(2 * np.pi))
    np.testing.assert_allclose(prior.log_prob(x), expected, rtol=1e-12)
    assert prior.log_prob(np.array([np.nan, 0.0, 0.0])) == -np.inf


def test_mvnormal_whitening_round_trip_and_log_determinants():
    prior = MultivariateNormal(MEAN, COV)
    theta = prior.sample(1000, np.random.default_rng(2))
    z, logdet = prior.to_normal(theta, with_logdet=True)
    back, logdet_back = prior.from_normal(z, with_logdet=True)
    np.testing.assert_allclose(back, theta, rtol=0, atol=1e-12)
    np.testing.assert_allclose(logdet, -logdet_back, rtol=1e-12)
    # log p_θ(θ) = log N(z; 0, I) + log|det ∂z/∂θ|
    log_nz = -0.5 * (z * z).sum(1) - 1.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(log_nz + logdet, prior.log_prob(theta), rtol=1e-12)
    # whitened draws are standard normal: covariance near I (1000 draws: ±0.1)
    np.testing.assert_allclose(np.cov(z.T), np.eye(3), atol=0.15)
    u, logdet_u = prior.to_unit(theta[:5], with_logdet=True)
    np.testing.assert_allclose(prior.from_unit(u), theta[:5], atol=1e-10)
    np.testing.assert_allclose(logdet_u, prior.log_prob(theta[:5]), rtol=1e-12)


def test_mvnormal_keeps_float32_and_refuses_non_finite_values():
    prior = MultivariateNormal(MEAN, COV)
    z = prior.to_normal(MEAN.astype(np.float32)[None])
    assert z.dtype == np.float32
    with pytest.raises(OutOfSupportError, match=r"theta\[..., 1\]"):
        prior.to_normal(np.array([[0.0, np.inf, 0.0]]))


@pytest.mark.parametrize(
    "mean, cov, message",
    [
        ([0.0, 0.0], [[1.0, 0.0]], "cov: expected a 2×2 matrix"),
        ([0.0, 0.0], [[1.0, 0.5], [0.4, 1.0]], "cov: must be symmetric"),
        ([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]], "cov: must be positive definite"),
        ([0.0, float("nan")], [[1.0, 0.0], [0.0, 1.0]], "mean: every value must be finite"),
        ([], [], "mean: expected a list of D numbers"),
    ],
)
def test_mvnormal_bad_parameters_are_named(mean, cov, message):
    with pytest.raises(ConfigError, match=message):
        MultivariateNormal(mean, cov)


def test_mvnormal_in_a_config_is_checked_at_load():
    node = {"_target_": "kestrel_core.MultivariateNormal", "mean": [0.0, 0.0]}
    good = load_config({"graph": {"theta": {"simulator": {**node, "cov": [[1, 0.5], [0.5, 1]]}}}})
    assert good.graph.nodes["theta"].simulator.target == "kestrel_core.MultivariateNormal"
    with pytest.raises(ConfigError, match="graph.theta.simulator.*positive definite"):
        load_config({"graph": {"theta": {"simulator": {**node, "cov": [[1, 2], [2, 1]]}}}})
