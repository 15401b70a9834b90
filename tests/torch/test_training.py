"""The shared training loop: configuration, status, stopping, yielding, validation, discard, bad rows."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch

import kestrel_torch.train._fit as _fit
from kestrel_core import (
    ConfigError,
    EstimatorContext,
    EstimatorError,
    InMemoryStore,
    Product,
    Status,
)
from kestrel_torch import FlowPosterior, GaussianPosterior, RunningNorm
from kestrel_torch.estimators._loss import EstimatorLoss

from .estimator_helpers import LinearGaussian, filled_store, one_thread  # noqa: F401 (fixture)
from .torchtest_helpers import SlowView, cpu_burner

LG = LinearGaussian.make()
X_O = LG.simulate(np.array([[0.3, -0.5, 0.8]]), np.random.default_rng(2))[0]

BRIEF_KEYS = {
    "max_epochs",
    "batch_size",
    "lr",
    "early_stop_patience",
    "lr_decay_factor",
    "lr_patience",
    "min_lr",
    "prior_epochs",
    "gamma",
    "cache_sync_every",
    "max_cache_samples",
    "discard_samples",
    "log_ratio_threshold",
    "embedding",
    "device",
    "seed",
}

pytestmark = pytest.mark.usefixtures("one_thread")


def small_store(n: int = 1024, validation: int = 128, seed: int = 5) -> InMemoryStore:
    return filled_store([LG.prior_block(n, np.random.default_rng(seed))], validation=validation)


def make(cls=GaussianPosterior, **kwargs):
    est = cls(**{"seed": 0, **kwargs})
    est.setup(LG.context())
    return est


def test_unknown_keyword_is_a_type_error_with_a_suggestion() -> None:
    with pytest.raises(
        TypeError,
        match=r"GaussianPosterior: unknown keyword argument 'max_epoch' \(did you mean 'max_epochs'\?\)",
    ):
        GaussianPosterior(max_epoch=3)
    with pytest.raises(TypeError, match=r"did you mean 'num_atoms'"):
        FlowPosterior(num_atom=3)
    with pytest.raises(TypeError, match=r"unknown keyword argument 'bins'"):
        GaussianPosterior(bins=3)  # a FlowPosterior keyword


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (GaussianPosterior, {"lr": -1.0}),
        (GaussianPosterior, {"batch_size": 0}),
        (GaussianPosterior, {"gamma": "x"}),
        (GaussianPosterior, {"lr_decay_factor": 1.5}),
        (GaussianPosterior, {"max_epochs": 2.5}),
        (GaussianPosterior, {"discard_samples": "yes"}),
        (GaussianPosterior, {"hidden_dim": 0}),
        (GaussianPosterior, {"momentum": 0.0}),
        (FlowPosterior, {"hidden_features": []}),
        (FlowPosterior, {"num_atoms": 1}),
        (GaussianPosterior, {"min_lr": 1.0}),
        (FlowPosterior, {"lr": math.nan}),
        (FlowPosterior, {"clip_max_norm": -1.0}),
    ],
)
def test_bad_values_raise_a_config_error_naming_the_keyword(cls, kwargs) -> None:
    with pytest.raises(ConfigError, match=f"{cls.__name__}\\({next(iter(kwargs))}="):
        cls(**kwargs)


def test_defaults() -> None:
    gauss, flow = GaussianPosterior(), FlowPosterior()
    assert BRIEF_KEYS <= set(gauss.config) and BRIEF_KEYS <= set(flow.config)
    assert gauss.config["lr"] == 1e-2 and flow.config["lr"] == 1e-3
    assert {
        "hidden_dim": 128,
        "num_layers": 3,
        "momentum": 0.01,
        "min_var": 1e-20,
    }.items() <= gauss.config.items()
    assert {
        "transforms": 3,
        "hidden_features": (64, 64),
        "bins": 8,
        "num_atoms": 10,
    }.items() <= flow.config.items()
    assert (
        gauss.config["max_epochs"] == 100
        and gauss.config["lr_decay_factor"] == 1.0
        and gauss.config["gamma"] == 0.5
    )
    assert gauss.config["clip_max_norm"] == flow.config["clip_max_norm"] == 0.0  # off


@pytest.mark.parametrize("clip", [0.0, 5.0])
def test_a_huge_gradient_is_clipped_before_the_step(clip: float) -> None:
    # One batch with a gradient of norm ~1e6 (an extreme importance weight, say). Adam's step is
    # bounded either way, but its second moment keeps the spike for ~1/(1 − β₂) = 1000 steps,
    # shrinking every later step: clipped, it holds at most (1 − β₂) · clip².
    model = torch.nn.Linear(4, 1)
    state = _fit.FitState()
    options = GaussianPosterior(lr=1e-3, clip_max_norm=clip).options
    state.start(model, [{"params": list(model.parameters())}], options)

    class Huge:
        nonfinite_rows = skipped_steps = 0

        def __call__(self, model, batch):
            return 1e6 * model(torch.ones(1, 4)).sum()

    assert _fit.train_step(state, Huge(), None, options.clip_max_norm) is not None
    second = max(float(s["exp_avg_sq"].sum()) for s in state.optimizer.state.values())
    if clip:
        assert second <= (1 - 0.999) * clip**2 * (1 + 1e-6)
    else:
        assert second > 1e6


def test_options_are_normalised_once_and_frozen() -> None:
    est = FlowPosterior(hidden_features=[32, 32], max_epochs=np.int64(5), lr=1)
    assert est.options.hidden_features == (32, 32) and type(est.options.max_epochs) is int
    assert type(est.options.lr) is float and est.config["lr"] == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.options.lr = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        est.config["lr"] = 2.0  # type: ignore[index]


def test_status_through_a_run() -> None:
    est = GaussianPosterior(max_epochs=3)
    assert est.status()["state"] == "idle" and est.status()["epoch"] == 0
    est.setup(LG.context())
    store = small_store()
    asyncio.run(est.train(store.view()))
    status = est.status()
    assert status["state"] == "done" and status["epoch"] == 3 and status["max_epochs"] == 3
    assert status["ended"] == "max_epochs"
    assert math.isfinite(status["train_loss"]) and math.isfinite(status["val_loss"])
    assert status["best_val_loss"] <= status["val_loss"]
    assert status["samples_seen"] == store.stats()["training"] == 1024 - 128
    assert status["lr"] == 1e-2 and status["nonfinite_rows"] == 0 and status["error"] is None


def test_request_stop_ends_training_after_the_current_step(monkeypatch: pytest.MonkeyPatch) -> None:
    est = make(max_epochs=100)
    steps: list[int] = []
    step = _fit.train_step

    def counting(state, loss, batch, clip=0.0):
        steps.append(1)
        out = step(state, loss, batch, clip)
        if len(steps) == 5:
            est.request_stop()
        return out

    monkeypatch.setattr(_fit, "train_step", counting)
    asyncio.run(est.train(small_store().view()))
    assert len(steps) == 5
    assert est.status()["state"] == "stopped" and est.total_epochs == 1
    est.options = dataclasses.replace(est.options, max_epochs=3)  # a total: 2 more
    # the stop request does not outlive the run it ended
    asyncio.run(est.train(small_store().view()))
    assert est.status()["state"] == "done" and est.total_epochs == 3


def test_k19_sampling_calls_interleave_with_training_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    est = make(max_epochs=3)
    steps: list[int] = []
    served: list[int] = []
    step = _fit.train_step

    def counting(state, loss, batch, clip=0.0):
        steps.append(len(served))
        return step(state, loss, batch, clip)

    monkeypatch.setattr(_fit, "train_step", counting)

    async def main() -> None:
        training = asyncio.create_task(est.train(small_store().view()))
        while not training.done():
            record = est.sample_proposal(64, {"x": X_O[None]})
            assert record["value"].shape == (64, 3)
            served.append(len(steps))
            await asyncio.sleep(0)
        await training

    asyncio.run(main())
    # every step was followed by a turn of the event loop in which a proposal was served
    assert len(steps) == 3 * (896 // 128)
    assert len(set(served)) >= len(steps)


def test_k21_validation_changes_no_state() -> None:
    est = make(max_epochs=1, embedding=RunningNorm(momentum=0.5))
    store = small_store()
    asyncio.run(est.train(store.view()))
    view = store.view()
    val = est._loader(view, (Status.VALIDATION,), "val")
    train = est._loader(view, (Status.TRAINING, Status.DISFAVOURED), "train")
    try:
        val.sync()
        train.sync()
        model = est._fit.model
        before = copy.deepcopy(model.state_dict())
        first, second = (
            est._binding.loss.evaluate(model, val),
            est._binding.loss.evaluate(model, val),
        )
        assert first == second and math.isfinite(first)
        after = model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert model.training
        assert not any(b.requires_grad for b in model.buffers())
        est._train_step(train.sample_batch(128))
        changed = model.state_dict()
        assert not torch.equal(before["embedding.net.mean"], changed["embedding.net.mean"])
        assert any(
            not torch.equal(before[k], changed[k]) for k in before if k.startswith("head.net")
        )
        assert all(b.grad is None for b in model.buffers())
    finally:
        val.close()
        train.close()


def test_k09_non_finite_rows_are_left_out() -> None:
    prior = Product([["uniform", 0.0, 1.0]] * 2)
    rng = np.random.default_rng(6)
    theta = prior.sample(1024, rng)
    x = theta + 0.05 * rng.normal(size=theta.shape)
    x[rng.random(1024) < 0.2] = np.nan
    x[7, 1] = np.inf
    store = InMemoryStore(min_samples=0, max_samples=1024, validation_samples=128)
    store.append(
        {"theta.value": theta, "theta.log_prob": prior.log_prob(theta), "x.value": x}, 1024
    )
    est = GaussianPosterior(max_epochs=1, seed=0)
    est.setup(EstimatorContext(node="theta", prior=prior, evidence=("x",)))
    asyncio.run(est.train(store.view()))
    status = est.status()
    assert status["nonfinite_rows"] > 0
    assert math.isfinite(status["train_loss"]) and math.isfinite(status["val_loss"])
    assert all(torch.isfinite(b).all() for b in est._fit.model.buffers() if b.is_floating_point())
    assert all(torch.isfinite(p).all() for p in est._fit.model.parameters())
    assert np.isfinite(est.sample_posterior(16, {"x": np.array([[0.5, 0.5]])})["value"]).all()

    x[:] = np.nan
    store = InMemoryStore(min_samples=0, max_samples=1024, validation_samples=0)
    store.append(
        {"theta.value": theta, "theta.log_prob": prior.log_prob(theta), "x.value": x}, 1024
    )
    est = GaussianPosterior(max_epochs=1, seed=0)
    est.setup(EstimatorContext(node="theta", prior=prior, evidence=("x",)))
    with pytest.raises(EstimatorError, match=r"node 'theta': no usable training row"):
        asyncio.run(est.train(store.view()))
    assert est.status()["state"] == "stopped" and "no usable training row" in est.status()["error"]


def test_discard_marks_samples_below_the_log_ratio_threshold() -> None:
    store = small_store()
    # threshold -20: prior draws are not that unlikely
    est = make(max_epochs=1, discard_samples=True)
    asyncio.run(est.train(store.view()))
    assert est.status()["discarded"] == 0 and store.stats()["disfavoured"] == 0
    est = make(max_epochs=1, discard_samples=True, log_ratio_threshold=1e9)  # every sample is below
    asyncio.run(est.train(store.view()))
    assert est.status()["discarded"] > 0 and store.stats()["disfavoured"] > 0
    assert store.stats()["validation"] == 128  # validation samples are never discarded


def test_early_stopping_and_lr_decay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        EstimatorLoss, "evaluate", lambda self, model, loader: 1.0
    )  # never improves
    est = make(max_epochs=50, early_stop_patience=3, lr_decay_factor=0.5, lr_patience=0)
    asyncio.run(est.train(small_store().view()))
    assert est.total_epochs == 4  # one improvement, then three epochs without
    assert est.status()["ended"] == "early_stop" and est.status()["best_epoch"] == 1
    assert est.status()["lr"] == pytest.approx(1e-2 * 0.5**3)
    est = make(max_epochs=50, early_stop_patience=2)
    asyncio.run(est.train(small_store().view()))
    assert est.total_epochs == 3 and est.status()["lr"] == 1e-2
    # min_lr floors the decay: a learning rate near zero would freeze the weights while the
    # running statistics keep following the buffer
    est = make(
        max_epochs=50, early_stop_patience=8, lr_decay_factor=0.1, lr_patience=0, min_lr=2e-4
    )
    asyncio.run(est.train(small_store().view()))
    assert est.total_epochs == 9 and est.status()["lr"] == pytest.approx(2e-4)


def test_the_best_model_is_kept_while_training_continues(monkeypatch: pytest.MonkeyPatch) -> None:
    losses = iter([3.0, 1.0, 2.0, 2.5])  # validation losses of the current model, epoch by epoch
    current: list[float] = []
    best_loss: list[float] = []

    def validation_loss(self, model, loader):
        if model is est._fit.model:
            current.append(next(losses))
            return current[-1]
        return best_loss[-1]  # the best model's loss does not change in this scenario

    monkeypatch.setattr(EstimatorLoss, "evaluate", validation_loss)
    est = make(max_epochs=4)
    keep_best = est._fit.keep_best

    def recording_keep_best():
        best_loss.append(current[-1])
        keep_best()

    est._fit.keep_best = recording_keep_best  # type: ignore[method-assign]
    states = []
    refit = est._binding.loss.refit

    def recording(model, loader):
        refit(model, loader)
        states.append(copy.deepcopy(model.state_dict()))

    est._binding.loss.refit = recording  # type: ignore[method-assign]
    asyncio.run(est.train(small_store().view()))
    best = est._fit.best.state_dict()
    assert all(torch.equal(best[k], states[1][k]) for k in best)  # epoch 2 had the lowest loss
    assert not all(torch.equal(best[k], states[3][k]) for k in best)
    assert est.status()["best_val_loss"] == 1.0 and not est._fit.best.training


@pytest.mark.parametrize("appends", [False, True])
def test_the_best_model_is_rescored_only_when_the_validation_set_changed(
    monkeypatch: pytest.MonkeyPatch, appends: bool
) -> None:
    losses = iter([3.0, 1.0, 2.0, 2.5, 2.7, 2.8])  # the current model's, epoch by epoch
    rescored: list[np.ndarray] = []

    def validation_loss(self, model, loader):
        if model is est._fit.model:
            return next(losses)
        rescored.append(loader.ids)
        return 1.0

    monkeypatch.setattr(EstimatorLoss, "evaluate", validation_loss)
    store = small_store()
    est = make(max_epochs=6)
    appended: list[bool] = []

    async def main() -> None:
        training = asyncio.create_task(est.train(store.view()))
        while not training.done():
            if appends and not appended and est.total_epochs == 2:
                # 64 new samples enter validation; 64 older validation samples move to training
                store.append(LG.prior_block(64, np.random.default_rng(8)), 64)
                appended.append(True)
            await asyncio.sleep(0)
        await training

    asyncio.run(main())
    assert est.total_epochs == 6 and est.status()["best_epoch"] == 2
    # an unchanged set: the loss taken with the best model is its loss; a changed set: the best
    # model is scored once on it
    assert len(rescored) == (1 if appends else 0)
    if appends:
        assert len(rescored[0]) == 128 and rescored[0].max() >= 1024  # the new samples


@pytest.mark.parametrize("every, seen", [(2, 896 + 64), (100, 896)])
def test_cache_sync_every_brings_in_new_samples(every: int, seen: int) -> None:
    store = small_store()
    est = make(max_epochs=6, cache_sync_every=every)
    appended: list[bool] = []

    async def main() -> None:
        training = asyncio.create_task(est.train(store.view()))
        while not training.done():
            if not appended and est.total_epochs == 1:
                # 64 new samples enter validation; 64 older validation samples move to training
                store.append(LG.prior_block(64, np.random.default_rng(8)), 64)
                appended.append(True)
            await asyncio.sleep(0)
        await training

    asyncio.run(main())
    assert appended and est.status()["samples_seen"] == seen


def train_with_an_append(view: Any, store: InMemoryStore) -> FlowPosterior:
    """A small seeded flow trained on ``view`` of ``store``; 64 samples are appended to the store
    after the first epoch (by a coroutine beside training, at a fixed point of the event loop)."""
    est = make(FlowPosterior, max_epochs=3, transforms=1, hidden_features=(16,), num_atoms=4)
    appended: list[bool] = []

    async def main() -> None:
        training = asyncio.create_task(est.train(view))
        while not training.done():
            if not appended and est.total_epochs == 1:
                store.append(LG.prior_block(64, np.random.default_rng(8)), 64)
                appended.append(True)
            await asyncio.sleep(0)
        await training

    asyncio.run(main())
    assert appended
    return est


def test_seeded_training_gives_the_same_weights_whatever_the_machine_load() -> None:
    # A direct train() call syncs its caches at fixed epochs, each taking the store as it is
    # there: a slow background fetch (as on a loaded machine) and a thread burning CPU beside
    # training change nothing. The second run is forced slow: every fetch after the first takes
    # longer than the whole training of the first run.
    store = small_store()
    fast = train_with_an_append(store.view(), store)
    store = small_store()
    view = SlowView(store.view(), delay=0.5)
    with cpu_burner():
        slow = train_with_an_append(view, store)
    assert view.calls > 2  # the slow fetches did happen
    assert fast.status()["samples_seen"] == slow.status()["samples_seen"] == 896 + 64
    for model in ("model", "best"):
        a = getattr(fast._fit, model).state_dict()
        b = getattr(slow._fit, model).state_dict()
        assert a.keys() == b.keys()
        assert [k for k in a if not torch.equal(a[k], b[k])] == [], model
    assert fast.status()["best_epoch"] == slow.status()["best_epoch"]


def test_public_names() -> None:
    import kestrel_torch

    assert kestrel_torch.__all__ == [
        "__version__",
        "Batch",
        "CachedDataLoader",
        "RunningNorm",
        "Embedding",
        "build_embedding",
        "embeddings",
        "StepwiseEstimator",
        "GaussianPosterior",
        "FlowPosterior",
        "FlowMatchingPosterior",
        "FlowLikelihood",
        "EnsemblePosterior",
    ]
    for name in kestrel_torch.__all__:
        assert hasattr(kestrel_torch, name), name
