"""MultivariateNormal given by its covariance, its precision or its Cholesky factor (issue 33
item 3): exactly one form, each checked and named in errors; the forms of one distribution give
the same density and, for a seed, the same draws up to floating point (numpy only)."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import ConfigError, MultivariateNormal, load_config

MEAN = np.array([1.0, -2.0, 0.5])
COV = np.array([[2.0, 0.6, 0.1], [0.6, 1.0, -0.3], [0.1, -0.3, 0.5]])
PRECISION = np.linalg.inv(COV)
TRIL = np.linalg.cholesky(COV)


def forms() -> dict[str, MultivariateNormal]:
    return {
        "cov": MultivariateNormal(MEAN, COV),
        "precision": MultivariateNormal(MEAN, precision=PRECISION),
        "scale_tril": MultivariateNormal(MEAN, scale_tril=TRIL),
    }


def test_the_three_forms_have_one_density_and_the_same_draws_for_a_seed():
    priors = forms()
    x = np.random.default_rng(1).normal(size=(50, 3)) * 2
    diff = x - MEAN
    quad = np.einsum("ni,ij,nj->n", diff, PRECISION, diff)
    expected = -0.5 * (quad + np.log(np.linalg.det(COV)) + 3 * np.log(2 * np.pi))
    draws = {}
    for form, prior in priors.items():
        np.testing.assert_allclose(prior.log_prob(x), expected, rtol=1e-12, err_msg=form)
        np.testing.assert_allclose(prior.cov, COV, atol=1e-14, err_msg=form)
        np.testing.assert_allclose(prior.precision, PRECISION, atol=1e-13, err_msg=form)
        np.testing.assert_allclose(prior.scale_tril, TRIL, atol=1e-14, err_msg=form)
        assert np.array_equal(prior.scale_tril, np.tril(prior.scale_tril)), form
        draws[form] = prior.sample(4000, np.random.default_rng(7))
        z = prior.to_normal(x)
        np.testing.assert_allclose(prior.from_normal(z), x, atol=1e-12, err_msg=form)
    for form in ("precision", "scale_tril"):
        np.testing.assert_allclose(draws[form], draws["cov"], rtol=0, atol=1e-12, err_msg=form)
    # the moments of the draws: 4000 draws, mean within ~4 standard errors, covariance ±0.15
    sample = draws["precision"]
    assert np.all(np.abs(sample.mean(0) - MEAN) < 4 * np.sqrt(np.diag(COV) / 4000))
    np.testing.assert_allclose(np.cov(sample.T), COV, atol=0.15)


def test_the_form_given_is_the_form_recorded():
    for form, prior in forms().items():
        config = prior.to_config()
        assert config["_target_"] == "kestrel_core.MultivariateNormal"
        assert set(config) == {"_target_", "mean", form}
        again = MultivariateNormal(**{k: v for k, v in config.items() if k != "_target_"})
        np.testing.assert_array_equal(again.scale_tril, prior.scale_tril)
        assert f"{form}=" in repr(prior)


def test_a_precision_or_a_cholesky_factor_in_a_yaml_config(tmp_path):
    rows = "\n".join(f"        - {row.tolist()}" for row in PRECISION)
    tril = "\n".join(f"        - {row.tolist()}" for row in TRIL)
    for key, text in (("precision", rows), ("scale_tril", tril)):
        path = tmp_path / f"{key}.yml"
        path.write_text(
            "graph:\n  theta:\n    simulator:\n      _target_: kestrel_core.MultivariateNormal\n"
            f"      mean: {MEAN.tolist()}\n      {key}:\n{text}\n"
        )
        prior = load_config(path).graph["theta"].simulator.build()
        np.testing.assert_allclose(prior.cov, COV, atol=1e-14)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cov": COV, "precision": PRECISION}, r"exactly one of .*found cov and precision"),
        ({"precision": PRECISION, "scale_tril": TRIL}, r"found precision and scale_tril"),
        ({}, r"exactly one of cov .*found none"),
        (
            {"precision": [[1.0, 0.5, 0], [0.4, 1.0, 0], [0, 0, 1]]},
            r"^precision: must be symmetric",
        ),
        (
            {"precision": [[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1]]},
            r"^precision: must be positive def",
        ),
        ({"precision": np.eye(2)}, r"^precision: expected a 3×3 matrix"),
        ({"precision": [[np.nan, 0, 0], [0, 1, 0], [0, 0, 1]]}, r"^precision: every value must"),
        ({"scale_tril": COV}, r"^scale_tril: must be lower triangular"),
        ({"scale_tril": -np.eye(3)}, r"^scale_tril: its diagonal must be positive"),
        ({"scale_tril": np.eye(4)}, r"^scale_tril: expected a 3×3 matrix"),
        ({"cov": [[1.0, 2.0, 0], [2.0, 1.0, 0], [0, 0, 1]]}, r"^cov: must be positive definite"),
    ],
)
def test_a_bad_matrix_is_named_by_its_argument(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        MultivariateNormal(MEAN, **kwargs)


def test_two_forms_in_a_config_are_refused_at_load_naming_the_node():
    node = {"_target_": "kestrel_core.MultivariateNormal", "mean": [0.0, 0.0]}
    both = {**node, "cov": np.eye(2).tolist(), "scale_tril": np.eye(2).tolist()}
    with pytest.raises(ConfigError, match=r"graph\.theta\.simulator: give exactly one of"):
        load_config({"graph": {"theta": {"simulator": both}}})
    bad = {**node, "precision": [[1.0, 2.0], [2.0, 1.0]]}
    with pytest.raises(ConfigError, match=r"graph\.theta\.simulator\.precision: must be positive"):
        load_config({"graph": {"theta": {"simulator": bad}}})
