"""Priors: parameter validation, closed-form densities, samplers, and the latent bijections."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kestrel_core import ConfigError, KestrelError, Product, ShapeError, prior_from_spec
from kestrel_core._errors import OutOfSupportError
from kestrel_core.execute._boundary import call_simulator
from kestrel_core.priors._special import Z_MAX, ndtr, ndtri

ENTRIES = {
    "uniform": ["uniform", -3.0, 5.0],
    "normal": ["normal", 1.0, 2.0],
    "lognormal": ["lognormal", 0.5, 0.7],
    "loguniform": ["loguniform", 1e-3, 10.0],
    "cosine": ["cosine", 0.0, 3.0],
    "triangular": ["triangular", 0.0, 1.0, 4.0],
    "triangular_left": ["triangular", 0.0, 0.0, 1.0],
    "triangular_right": ["triangular", -1.0, 1.0, 1.0],
}
BOUNDED = ["uniform", "loguniform", "cosine", "triangular", "triangular_left", "triangular_right"]


def closed_form_log_pdf(entry: list, x: float) -> float:
    """Textbook densities, written independently of the implementation."""
    kind, *p = entry
    if kind == "uniform":
        return -math.log(p[1] - p[0]) if p[0] <= x <= p[1] else -math.inf
    if kind == "normal":
        return -0.5 * ((x - p[0]) / p[1]) ** 2 - math.log(p[1] * math.sqrt(2 * math.pi))
    if kind == "lognormal":
        return -0.5 * ((math.log(x) - p[0]) / p[1]) ** 2 - math.log(
            x * p[1] * math.sqrt(2 * math.pi)
        )
    if kind == "loguniform":
        return -math.log(x * math.log(p[1] / p[0])) if p[0] <= x <= p[1] else -math.inf
    if kind == "cosine":
        w = p[1] - p[0]
        return math.log(math.pi / (2 * w) * math.sin(math.pi * (x - p[0]) / w))
    if kind == "triangular":
        a, c, b = p
        dens = 2 * (x - a) / ((b - a) * (c - a)) if x < c else 2 * (b - x) / ((b - a) * (b - c))
        return math.log(dens)
    raise AssertionError(kind)


# -- K10 ---------------------------------------------------------------------------------------

K10 = [["uniform", 0.0, 1.0], ["normal", 0.0, 1.0]]


def test_k10_bounds_map_to_finite_latents_in_float32_and_float64():
    prior = Product(K10)
    z32 = prior.to_normal(np.array([[1.0, 0.0]], dtype=np.float32))
    z64 = prior.to_normal(np.array([[0.0, 0.0]]))
    assert z32.dtype == np.float32 and z64.dtype == np.float64
    assert np.isfinite(z32).all() and np.isfinite(z64).all()
    assert z32[0, 0] > 5 and z64[0, 0] < -5  # the bounds are the extremes, not clamped values
    for dtype in (np.float32, np.float64):
        u = prior.to_unit(np.array([[1.0, 0.0], [0.0, 0.0]], dtype=dtype))
        assert u.dtype == dtype and u[:, 0].tolist() == [1.0, 0.0]


@pytest.mark.parametrize("method", ["to_normal", "to_unit"])
def test_k10_out_of_support_raises_naming_parameter_value_and_bounds(method):
    prior = Product(K10)
    with pytest.raises(OutOfSupportError, match=r"priors\[0\].*1\.5.*\[0\.0, 1\.0\]") as info:
        getattr(prior, method)(np.array([[1.5, 0.0]]))
    assert isinstance(info.value, ValueError) and isinstance(info.value, KestrelError)
    assert prior.log_prob(np.array([[1.5, 0.0]])).tolist() == [-math.inf]


@pytest.mark.parametrize(("dtype", "tol"), [(np.float64, 1e-10), (np.float32, 1e-5)])
@pytest.mark.parametrize("space", ["normal", "unit"])
def test_k10_round_trip_of_interior_points(dtype, tol, space):
    prior = Product(K10)
    rng = np.random.default_rng(0)
    theta = np.stack([rng.uniform(1e-6, 1 - 1e-6, 1000), rng.normal(size=1000)], axis=1).astype(
        dtype
    )
    latent = getattr(prior, f"to_{space}")(theta)
    back = getattr(prior, f"from_{space}")(latent)
    assert latent.dtype == dtype and back.dtype == dtype and np.isfinite(latent).all()
    np.testing.assert_allclose(back, theta, rtol=tol, atol=tol)


# -- every type --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ENTRIES))
@pytest.mark.parametrize(("dtype", "tol"), [(np.float64, 1e-10), (np.float32, 1e-5)])
def test_round_trip_every_type(name, dtype, tol):
    prior = Product([ENTRIES[name], ["fixed", 7.0]])
    theta = prior.sample(1000, np.random.default_rng(1)).astype(dtype)
    for space in ("normal", "unit"):
        latent = getattr(prior, f"to_{space}")(theta)
        assert latent.shape == (1000, 1) and latent.dtype == dtype
        back = getattr(prior, f"from_{space}")(latent)
        assert back.dtype == dtype
        keep = slice(None)
        if space == "unit" and dtype == np.float32:
            # float32 cannot resolve u near 0 or 1: far tails of unbounded priors lose precision
            keep = (latent[:, 0] > 0.01) & (latent[:, 0] < 0.99)
        np.testing.assert_allclose(
            back[keep], theta[keep], rtol=tol, atol=tol * np.abs(theta).max()
        )


@pytest.mark.parametrize("name", BOUNDED + ["lognormal"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bounds_give_finite_monotone_latents(name, dtype):
    prior = Product([ENTRIES[name]])
    low, high = prior.low[0], prior.high[0] if np.isfinite(prior.high[0]) else 20.0
    theta = np.linspace(low, high, 7)[:, None]
    z = prior.to_normal(theta.astype(dtype))[:, 0]
    u = prior.to_unit(theta.astype(dtype))[:, 0]
    assert z.dtype == dtype and np.isfinite(z).all() and np.abs(z).max() <= Z_MAX
    assert (np.diff(z) > 0).all() and (np.diff(u) > 0).all()
    z64, u64 = prior.to_normal(theta)[:, 0], prior.to_unit(theta)[:, 0]
    assert u64[0] == 0.0 and z64[0] == -Z_MAX  # the bounds are the extremes
    if name != "lognormal":
        assert u64[-1] == 1.0 and z64[-1] == Z_MAX
    np.testing.assert_allclose(
        prior.from_normal(z64[[0, -1], None]), theta[[0, -1]], rtol=1e-14, atol=0
    )


def test_float32_rounding_of_a_bound_counts_as_the_bound():
    prior = Product([["uniform", 0.7, 2.0], ["fixed", 0.7]])
    at_bound = np.full((1, 2), 0.7, dtype=np.float32)  # float32(0.7) < 0.7
    assert float(at_bound[0, 0]) < 0.7
    z = prior.to_normal(at_bound)
    assert z.tolist() == [[-Z_MAX]]
    assert prior.log_prob(at_bound)[0] == pytest.approx(-math.log(1.3))
    np.testing.assert_array_equal(prior.from_normal(z), at_bound)
    with pytest.raises(OutOfSupportError, match=r"priors\[0\].*0\.69"):
        prior.to_normal(np.array([[0.69, 0.7]], dtype=np.float32))


@pytest.mark.parametrize("name", list(ENTRIES))
def test_log_prob_matches_closed_form(name):
    entry = ENTRIES[name]
    prior = Product([entry])
    rng = np.random.default_rng(2)
    xs = prior.sample(20, rng)[:, 0]
    got = prior.log_prob(xs[:, None])
    want = [closed_form_log_pdf(entry, float(x)) for x in xs]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_log_prob_of_a_product_is_the_sum_and_keeps_batch_shape():
    entries = [ENTRIES["uniform"], ["fixed", 2.0], ENTRIES["normal"]]
    prior = Product(entries)
    theta = np.array([[[0.5, 2.0, 1.5], [-1.0, 2.0, 0.0]]])  # batch shape (1, 2)
    lp = prior.log_prob(theta)
    assert lp.shape == (1, 2) and prior.log_prob(theta[0, 0]).shape == ()
    want = closed_form_log_pdf(entries[0], 0.5) + closed_form_log_pdf(entries[2], 1.5)
    assert lp[0, 0] == pytest.approx(want, rel=1e-14)
    assert prior.log_prob(np.array([0.5, 2.5, 1.5])) == -math.inf  # fixed value differs


@pytest.mark.parametrize("name", BOUNDED)
def test_densities_integrate_to_one(name):
    prior = Product([ENTRIES[name]])
    grid = np.geomspace if name == "loguniform" else np.linspace
    x = grid(prior.low[0], prior.high[0], 200_001)
    total = np.trapezoid(np.exp(prior.log_prob(x[:, None])), x)
    assert total == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_log_prob_is_minus_inf_outside_the_support(name):
    prior = Product([ENTRIES[name]])
    outside = [np.nan, np.inf, -np.inf]
    if np.isfinite(prior.low[0]):
        outside.append(prior.low[0] - 1e-9)
    if np.isfinite(prior.high[0]):
        outside.append(prior.high[0] + 1e-9)
    assert (prior.log_prob(np.array(outside)[:, None]) == -np.inf).all()


@pytest.mark.parametrize("name", list(ENTRIES))
def test_logdets_match_finite_difference_jacobians(name):
    prior = Product([ENTRIES[name]])
    theta = prior.sample(50, np.random.default_rng(3))
    h = 1e-7 * np.maximum(1e-3, np.abs(theta))
    for space in ("normal", "unit"):
        to, frm = getattr(prior, f"to_{space}"), getattr(prior, f"from_{space}")
        latent, logdet = to(theta, with_logdet=True)
        slope = (to(theta + h) - to(theta - h)) / (2 * h)
        ok = (theta[:, 0] - h[:, 0] > prior.low[0]) & (theta[:, 0] + h[:, 0] < prior.high[0])
        np.testing.assert_allclose(logdet[ok], np.log(np.abs(slope[ok, 0])), atol=1e-5)
        back, inv_logdet = frm(latent, with_logdet=True)
        np.testing.assert_allclose(inv_logdet, -logdet, atol=1e-9)
    z, logdet = prior.to_normal(theta, with_logdet=True)
    # change of variables: log p(θ) = log N(z) + log|dz/dθ|
    np.testing.assert_allclose(
        prior.log_prob(theta), (-0.5 * z**2 - 0.5 * np.log(2 * np.pi)).sum(-1) + logdet, atol=1e-9
    )


MOMENTS = {  # (mean, variance) in closed form
    "uniform": (1.0, 64 / 12),
    "normal": (1.0, 4.0),
    "lognormal": (math.exp(0.5 + 0.49 / 2), (math.exp(0.49) - 1) * math.exp(1 + 0.49)),
    "loguniform": (
        (10 - 1e-3) / math.log(1e4),
        (100 - 1e-6) / (2 * math.log(1e4)) - ((10 - 1e-3) / math.log(1e4)) ** 2,
    ),
    "cosine": (1.5, 9 / math.pi**2 * (math.pi**2 / 4 - 2)),
    "triangular": (5 / 3, (0 + 1 + 16 - 0 - 0 - 4) / 18),
    "triangular_left": (1 / 3, 1 / 18),
    "triangular_right": (1 / 3, (1 + 1 + 1 + 1 + 1 - 1) / 18),
}


@pytest.mark.parametrize("name", list(ENTRIES))
def test_sampler_moments_and_probability_integral_transform(name):
    n = 200_000
    prior = Product([ENTRIES[name]])
    theta = prior.sample(n, np.random.default_rng(4))
    assert theta.shape == (n, 1) and theta.dtype == np.float64
    assert (theta >= prior.low).all() and (theta <= prior.high).all()
    mean, var = MOMENTS[name]
    assert theta.mean() == pytest.approx(mean, abs=5 * math.sqrt(var / n))
    assert theta.var() == pytest.approx(var, rel=0.03)
    u = prior.to_unit(theta)  # the CDF of draws is uniform, their normal latents standard
    assert u.mean() == pytest.approx(0.5, abs=0.005) and u.var() == pytest.approx(1 / 12, rel=0.02)
    z = prior.to_normal(theta)
    assert z.mean() == pytest.approx(0.0, abs=0.015) and z.var() == pytest.approx(1.0, rel=0.02)


# -- the product -------------------------------------------------------------------------------


def test_fixed_entries_are_outside_the_latent_space():
    prior = Product([["fixed", 2.0], ENTRIES["normal"], ["fixed", -1.0]])
    assert (prior.full_dim, prior.dim, prior.free.tolist()) == (3, 1, [False, True, False])
    assert prior.low.tolist() == [2.0, -math.inf, -1.0] and prior.high.tolist() == [
        2.0,
        math.inf,
        -1.0,
    ]
    theta = prior.from_normal(np.array([[0.0], [1.0]]))
    assert theta.tolist() == [[2.0, 1.0, -1.0], [2.0, 3.0, -1.0]]
    with pytest.raises(OutOfSupportError, match=r"priors\[2\].*fixed value=-1\.0.*-2\.0"):
        prior.to_unit(np.array([[2.0, 0.0, -2.0]]))


def test_sampling_is_reproducible_and_a_simulator():
    prior = Product([ENTRIES["uniform"], ENTRIES["cosine"], ["fixed", 3.0]])
    a = prior.sample(5, np.random.default_rng(9))
    b = call_simulator("theta", prior, 5, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (5, 3) and (a[:, 2] == 3.0).all()
    assert prior.simulate_batch(0).shape == (0, 3)


def test_integer_input_becomes_float64():
    prior = Product([ENTRIES["uniform"]])
    assert prior.to_unit(np.array([[1]])).dtype == np.float64


def test_shapes_are_checked():
    prior = Product(K10)
    with pytest.raises(ShapeError, match=r"theta has shape \(4, 3\); expected \(\.\.\., 2\)"):
        prior.to_normal(np.zeros((4, 3)))
    with pytest.raises(ShapeError, match=r"z has shape \(4,\); expected \(\.\.\., 2\)"):
        prior.from_normal(np.zeros(4))


def test_latents_out_of_range_raise():
    prior = Product([["fixed", 0.0], ENTRIES["uniform"]])
    with pytest.raises(OutOfSupportError, match=r"u\[\.\.\., 0\] \(priors\[1\].*1\.2.*\[0, 1\]"):
        prior.from_unit(np.array([[0.5], [1.2]]))
    with pytest.raises(OutOfSupportError, match=r"z\[\.\.\., 0\].*nan"):
        prior.from_normal(np.array([[np.nan]]))
    assert prior.from_normal(np.array([[-np.inf], [np.inf]]))[:, 1].tolist() == [-3.0, 5.0]


def test_known_normal_quantiles():
    prior = Product([["uniform", 0.0, 1.0]])
    z = prior.to_normal(np.array([[0.975], [1e-10], [0.5]]))[:, 0]
    np.testing.assert_allclose(z, [1.959963984540054, -6.361340902404056, 0.0], rtol=1e-13, atol=0)
    np.testing.assert_allclose(
        ndtr(np.array([-10.0, -30.0])), [7.619853024160527e-24, 4.906713927148187e-198], rtol=1e-12
    )
    u = np.geomspace(1e-300, 0.5, 500)
    np.testing.assert_allclose(ndtr(ndtri(u)), u, rtol=5e-13)
    v = 1.0 - u  # 1 - v is exact for v ≥ 0.5: the upper half is the mirror image
    np.testing.assert_array_equal(ndtri(v), -ndtri(1.0 - v))


# -- parameter validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([["uniform", 1.0, 0.0]], r"^priors\[0\]: uniform low=1\.0 must be < high=0\.0$"),
        (
            [ENTRIES["normal"], ["normal", 0.0, -1.0]],
            r"^priors\[1\]: normal std=-1\.0 must be > 0$",
        ),
        ([["lognormal", 0.0, 0.0]], r"priors\[0\]: lognormal sigma=0\.0 must be > 0"),
        ([["loguniform", 0.0, 1.0]], r"priors\[0\]: loguniform low=0\.0 must be > 0"),
        ([["loguniform", 2.0, 1.0]], r"priors\[0\]: loguniform low=2\.0 must be < high=1\.0"),
        ([["cosine", 1.0, 1.0]], r"priors\[0\]: cosine low=1\.0 must be < high=1\.0"),
        (
            [["triangular", 0.0, 2.0, 1.0]],
            r"priors\[0\]: triangular c=2\.0 must lie in \[a=0\.0, b=1\.0\]",
        ),
        ([["triangular", 1.0, 1.0, 1.0]], r"priors\[0\]: triangular a=1\.0 must be < b=1\.0"),
        (
            [["unifrom", 0.0, 1.0]],
            r"priors\[0\]: unknown prior type 'unifrom'; did you mean 'uniform'\?",
        ),
        ([["normal", 0.0]], r"priors\[0\]: normal takes 2 parameters \(mean, std\), got 1"),
        ([["normal", 0.0, "wide"]], r"priors\[0\]: normal std='wide' is not a number"),
        ([["uniform", 0.0, float("inf")]], r"priors\[0\]: uniform high=inf must be finite"),
        ([["uniform", True, 2.0]], r"priors\[0\]: uniform low=True is not a number"),
        (
            [[0.0, 1.0]],
            r"priors\[0\]: expected a list \[type, \*params\] starting with the type name",
        ),
        (["uniform"], r"priors\[0\]: expected a list \[type, \*params\]"),
        ([], r"priors: needs at least one entry"),
    ],
)
def test_invalid_entries_raise_config_error(entries, match):
    with pytest.raises(ConfigError, match=match):
        Product(entries)


def test_numeric_strings_are_accepted():
    # YAML 1.1 reads 1e-3 (no dot) as a string
    assert Product([["loguniform", "1e-3", 1]]).specs == [["loguniform", 0.001, 1.0]]


def test_prior_from_spec_uses_the_key_path():
    with pytest.raises(ConfigError, match=r"^graph\.z\.simulator\.priors\[0\]: uniform low=1\.0"):
        prior_from_spec([["uniform", 1.0, 0.0]], path="graph.z.simulator.priors")
    prior = prior_from_spec({"_target_": "kestrel_core.Product", "priors": [ENTRIES["normal"]]})
    assert prior.specs == [ENTRIES["normal"]] and prior_from_spec(prior) is prior
    assert repr(prior) == "Product([['normal', 1.0, 2.0]])"


# -- K45 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_k45_prior_log_prob_is_minus_inf_row_by_row_outside_the_support(dtype):
    """A density evaluation never raises for a value outside the support (only the bijections
    refuse it): −inf in that row, the other rows as they are alone."""
    prior = Product([["uniform", -1.0, 1.0], ["uniform", -1.0, 1.0], ["fixed", 2.0]])
    inside = np.array([[0.3, -0.2, 2.0], [-1.0, 1.0, 2.0], [0.0, 0.0, 2.0]], dtype=dtype)
    outside = np.array(
        [[1.5, 0.0, 2.0], [0.0, -1.01, 2.0], [0.0, 0.0, 3.0], [np.nan, 0.0, 2.0]], dtype=dtype
    )
    mixed = np.concatenate([inside[:1], outside[:2], inside[1:], outside[2:]])
    got = prior.log_prob(mixed)
    assert got.shape == (7,) and np.isfinite(got[[0, 3, 4]]).all()
    assert np.all(got[[1, 2, 5, 6]] == -np.inf)
    assert np.array_equal(got[[0, 3, 4]], prior.log_prob(inside))
    with pytest.raises(OutOfSupportError, match="priors\\[0\\]"):
        prior.to_normal(outside[:1])  # a transform's input still has to be in the support


def test_k45_multivariate_normal_log_prob_is_minus_inf_for_non_finite_rows():
    from kestrel_core import MultivariateNormal

    prior = MultivariateNormal([0.0, 0.0], [[1.0, 0.5], [0.5, 1.0]])
    theta = np.array([[0.1, 0.2], [np.inf, 0.0], [0.0, np.nan], [-0.4, 0.3]])
    got = prior.log_prob(theta)
    assert np.all(got[1:3] == -np.inf) and np.isfinite(got[[0, 3]]).all()
    assert np.array_equal(got[[0, 3]], prior.log_prob(theta[[0, 3]]))
