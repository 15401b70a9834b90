"""Bad input to the estimator, whole kinds: seeds (K25), foreign arrays (K28), float32 casts
(K29), and checkpoints that would need unpickling (issue 11, security)."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
import torch
from torch import nn

from kestrel_core import EstimatorError
from kestrel_torch import GaussianPosterior, RunningNorm
from kestrel_torch.checkpoint._state import from_bytes, load_module_state, module_state, to_bytes
from kestrel_torch.embeddings import SignalProjection
from kestrel_torch.nets._moments import RunningMoments

from .estimator_helpers import LinearGaussian, filled_store, one_thread  # noqa: F401 (fixture)

LG = LinearGaussian.make()
X_O = LG.simulate(np.array([[0.3, -0.5, 0.8]]), np.random.default_rng(2))
FAST = {"max_epochs": 2, "batch_size": 64}

pytestmark = pytest.mark.usefixtures("one_thread")


class DropoutNet(nn.Module):
    """An embedding with dropout: its training randomness must follow the estimator's seed."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float())


@pytest.fixture(scope="module")
def store():
    return filled_store([LG.prior_block(512, np.random.default_rng(5))], validation=64)


def train(store, context_seed: int = 1, **options) -> GaussianPosterior:
    est = GaussianPosterior(**{"seed": 0, **FAST, **options})
    est.setup(LG.context(seed=context_seed))
    asyncio.run(est.train(store.view()))
    return est


@pytest.fixture(scope="module")
def trained(store) -> GaussianPosterior:
    return train(store)


def draws(est, seed=None, n=64):
    rng = None if seed is None else np.random.default_rng(seed)
    return est.sample_posterior(n, {"x": X_O}, rng=rng)["value"]


# -- K25: the estimator's seed fixes training; the sampling call's seed fixes the draws ---------


def test_k25_draws_follow_the_sampling_seed_not_the_estimator_seed(store, trained):
    a, b = draws(trained, 1), draws(trained, 2)
    assert not np.array_equal(a, b)  # two sampling seeds, two sets of draws
    np.testing.assert_array_equal(draws(trained, 1), a)  # the same sampling seed: the same
    again = train(store)  # seed 0 again: the same training ...
    np.testing.assert_array_equal(draws(again, 1), a)  # ... and the same draws for seed 1
    assert not np.array_equal(draws(trained), draws(trained))  # no seed: the stream moves on
    # no sampling seed: the run's stream (context seed), never the estimator's `seed: 0`
    other = train(store, context_seed=7)
    np.testing.assert_array_equal(draws(other, 1), a)  # training fixed by `seed: 0` alone
    assert not np.array_equal(draws(other), draws(train(store)))
    prop = [trained.sample_proposal(8, {"x": X_O}, rng=np.random.default_rng(s)) for s in (3, 4)]
    assert not np.array_equal(prop[0]["value"], prop[1]["value"])
    prior = [trained.sample_prior(8, rng=np.random.default_rng(s))["value"] for s in (3, 3)]
    np.testing.assert_array_equal(*prior)


def test_k25_dropout_draws_from_the_estimator_generator(store):
    spec = {"_target_": "tests.torch.test_bad_input.DropoutNet"}
    first = train(store, embedding=spec)
    torch.manual_seed(12345)  # disturb the global generator between the two trainings
    torch.rand(1000)
    before = torch.get_rng_state()
    second = train(store, embedding=spec)
    assert torch.equal(torch.get_rng_state(), before)  # training left the global state alone
    sa, sb = first._fit.model.state_dict(), second._fit.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # dropout was active: another estimator seed trains other weights
    third = train(store, embedding=spec, seed=1)
    assert not torch.equal(
        third._fit.model.state_dict()["embedding.net.net.0.weight"],
        sa["embedding.net.net.0.weight"],
    )


# -- K28: conditions of any byte order and strides, as the native array -------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a.astype(">f8"),
        lambda a: np.ascontiguousarray(a[:, ::-1])[:, ::-1],
        lambda a: np.repeat(a, 2, axis=1)[:, ::2],
        lambda a: np.asfortranarray(np.repeat(a, 3, axis=0)),
    ],
    ids=["big-endian", "reversed", "strided", "fortran"],
)
def test_k28_foreign_arrays_give_the_native_posterior(trained, make):
    foreign = make(X_O)
    x = X_O if foreign.shape[0] == 1 else np.repeat(X_O, 3, axis=0)  # the same rows, native
    native = trained.sample_posterior(3, {"x": x}, rng=np.random.default_rng(0))
    got = trained.sample_posterior(3, {"x": foreign}, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(got["value"], native["value"])
    theta = native["value"]
    np.testing.assert_array_equal(
        trained.log_prob(theta, {"x": foreign}), trained.log_prob(theta, {"x": x})
    )
    with pytest.raises(EstimatorError, match="condition 'x'.*numeric"):
        trained.sample_posterior(3, {"x": np.array([["a"] * 5])})


# -- K29: normalisation statistics stay float64 through casts and checkpoints -------------------


def _stats_modules():
    return [
        RunningNorm(momentum=0.5),
        SignalProjection(2, signal_input=False, update_every=1),
        RunningMoments(4, 0.5, full=True),
    ]


def _run(module, x):
    if isinstance(module, RunningMoments):
        module.update(x)
        return module.normalize(x)
    return module(x)


@pytest.mark.parametrize("index", range(3), ids=["RunningNorm", "SignalProjection", "Moments"])
def test_k29_statistics_stay_float64_after_casts_and_save_load(index):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(2.75e-3 + 1e-9 * rng.standard_normal((64, 4)))  # float64 rows
    reference, cast = _stats_modules()[index], _stats_modules()[index].to(torch.float32)
    cast = cast.float().half().to(torch.float32)  # every cast on the way
    out_ref, out_cast = _run(reference, x), _run(cast, x)
    buffers = {k: v for k, v in cast.state_dict().items() if v.is_floating_point()}
    assert buffers and all(v.dtype == torch.float64 for v in buffers.values())
    torch.testing.assert_close(out_cast, out_ref, rtol=1e-12, atol=0)
    # save → load into a fresh, cast copy (the estimator's checkpoint format)
    payload = from_bytes(to_bytes({"format": 1, "m": module_state(cast)}), "cpu")
    fresh = _stats_modules()[index].to(torch.float32)
    load_module_state(fresh, payload["m"])
    assert all(fresh.state_dict()[k].dtype == torch.float64 for k in buffers)
    cast.eval(), fresh.eval()
    assert torch.equal(_run(fresh, x), _run(cast, x))


# -- security: a checkpoint that needs unpickling is refused, never executed --------------------


class _Payload:
    ran = False

    def __reduce__(self):
        return (_mark_ran, ())


def _mark_ran():
    _Payload.ran = True
    return {}


def test_checkpoint_bytes_are_read_with_weights_only(trained):
    buffer = io.BytesIO()
    torch.save({"format": 1, "evil": _Payload()}, buffer)
    with pytest.raises(EstimatorError, match="cannot read"):
        trained.load_bytes(buffer.getvalue(), source="evil.pt")
    assert not _Payload.ran
