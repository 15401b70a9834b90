"""save/load: round trips, resumed training (K14, K31), plain attributes and a new process (K13)."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import kestrel_torch.train._fit as _fit
from kestrel_core import EstimatorError
from kestrel_torch import FlowPosterior, GaussianPosterior
from kestrel_torch.checkpoint._state import CHECKPOINT_FILE

from .estimator_helpers import LinearGaussian, filled_store, one_thread  # noqa: F401 (fixture)

LG = LinearGaussian.make()
REPO = Path(__file__).resolve().parents[2]
X_O = LG.simulate(np.array([[0.3, -0.5, 0.8]]), np.random.default_rng(2))[0]
FLOW = {"transforms": 1, "hidden_features": (16,), "num_atoms": 4}

pytestmark = pytest.mark.usefixtures("one_thread")


def pairs(n: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """``n`` fixed (θ, x) pairs."""
    rng = np.random.default_rng(11)
    theta = rng.normal(size=(n, 3))
    return theta, LG.simulate(theta, rng)


def store_of(n: int = 1024, seed: int = 5):
    return filled_store([LG.prior_block(n, np.random.default_rng(seed))], validation=128)


def trained(cls, store, **kwargs):
    est = cls(seed=0, **kwargs)
    est.setup(LG.context())
    asyncio.run(est.train(store.view()))
    return est


def same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(
    "cls, kwargs",
    [(GaussianPosterior, {"max_epochs": 3}), (FlowPosterior, {"max_epochs": 2, **FLOW})],
)
def test_round_trip(tmp_path: Path, cls, kwargs) -> None:
    est = trained(cls, store_of(), **kwargs)
    est.save(str(tmp_path))
    torch.load(tmp_path / CHECKPOINT_FILE, weights_only=True)  # tensors and plain containers only
    loaded = cls(seed=0, **kwargs)
    loaded.setup(LG.context())
    loaded.load(str(tmp_path))
    assert loaded.total_epochs == est.total_epochs
    assert same_state(loaded._fit.model, est._fit.model) and same_state(
        loaded._fit.best, est._fit.best
    )
    assert not loaded._fit.best.training and loaded._fit.model.training
    saved, restored = est._fit.optimizer.state_dict(), loaded._fit.optimizer.state_dict()
    for key, state in saved["state"].items():
        assert all(
            torch.equal(value, restored["state"][key][name]) for name, value in state.items()
        )
    theta, x = pairs()
    np.testing.assert_allclose(
        loaded.log_prob(theta, {"x": x}), est.log_prob(theta, {"x": x}), rtol=0, atol=1e-10
    )


def test_bytes_round_trip_like_the_file(tmp_path: Path) -> None:
    est = trained(GaussianPosterior, store_of(), max_epochs=2)
    data = est.save_bytes()
    torch.load(io.BytesIO(data), weights_only=True)  # tensors and plain containers only
    est.save(str(tmp_path))
    theta, x = pairs()
    for load in (lambda e: e.load_bytes(data), lambda e: e.load(str(tmp_path))):
        loaded = GaussianPosterior(seed=0, max_epochs=2)
        loaded.setup(LG.context())
        load(loaded)
        assert loaded.total_epochs == 2 and same_state(loaded._fit.best, est._fit.best)
        np.testing.assert_array_equal(
            loaded.log_prob(theta, {"x": x}), est.log_prob(theta, {"x": x})
        )
    with pytest.raises(EstimatorError, match="cannot read checkpoint bytes"):
        loaded.load_bytes(b"not a checkpoint")
    flow = FlowPosterior()
    flow.setup(LG.context())
    with pytest.raises(
        EstimatorError, match="checkpoint bytes holds a GaussianPosterior over 3 parameters"
    ):
        flow.load_bytes(data)


def test_load_errors_name_the_problem(tmp_path: Path) -> None:
    est = GaussianPosterior()
    est.setup(LG.context())
    with pytest.raises(EstimatorError, match="no checkpoint at"):
        est.load(str(tmp_path))
    est.save(str(tmp_path))  # untrained: only the counters
    flow = FlowPosterior()
    flow.setup(LG.context())
    with pytest.raises(
        EstimatorError,
        match="holds a GaussianPosterior over 3 parameters; expected a FlowPosterior",
    ):
        flow.load(str(tmp_path))
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(EstimatorError, match="cannot read checkpoint"):
        est.load(str(tmp_path))


def test_k14_resume_continues_epochs_weights_and_optimizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_of()
    trained(GaussianPosterior, store, max_epochs=3).save(str(tmp_path))
    resumed = GaussianPosterior(seed=0, max_epochs=5)  # a total: 2 more after the 3 loaded
    resumed.setup(LG.context())
    resumed.load(str(tmp_path))
    loaded = {k: v.clone() for k, v in resumed._fit.model.named_parameters()}
    first = next(iter(resumed._fit.model.parameters()))
    step_before = float(resumed._fit.optimizer.state[first]["step"])
    at_first_step: list[dict[str, torch.Tensor]] = []
    steps = []
    train_step = _fit.train_step

    def recording(state, loss, batch, clip=0.0):
        if not at_first_step:
            at_first_step.append({k: v.clone() for k, v in resumed._fit.model.named_parameters()})
        steps.append(1)
        return train_step(state, loss, batch, clip)

    monkeypatch.setattr(_fit, "train_step", recording)
    store.append(LG.prior_block(64, np.random.default_rng(9)), 64)  # 64 new samples arrive
    asyncio.run(resumed.train(store.view()))
    assert resumed.total_epochs == 5  # the epoch counter continues
    # training starts from the loaded weights
    assert all(torch.equal(at_first_step[0][k], loaded[k]) for k in loaded)
    # and the loaded optimiser
    assert float(resumed._fit.optimizer.state[first]["step"]) == step_before + len(steps)
    # the new samples took validation places, moving 64 older ones into training: all were used
    assert resumed.status()["samples_seen"] == 896 + 64


def test_k13_plain_attribute_state_survives_copy_save_and_a_new_process(tmp_path: Path) -> None:
    spec = {"_target_": "tests.torch.estimator_helpers.BasisEmbedding", "components": 3}
    est = trained(GaussianPosterior, store_of(2048), max_epochs=1, embedding=spec)
    # a plain attribute, set during the first training forward
    basis = est._fit.best.embedding.net.basis
    assert isinstance(basis, torch.Tensor) and basis is not est._fit.model.embedding.net.basis
    proposals = est.sample_proposal(256, {"x": X_O[None]})["value"]
    # the learned basis is used: far narrower than the prior (σ = 1)
    assert np.all(proposals.std(0) < 0.8)
    est.save(str(tmp_path))
    theta, x = pairs()
    np.savez(tmp_path / "pairs.npz", theta=theta, x=x)
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from kestrel_torch import GaussianPosterior
        from tests.torch.estimator_helpers import LinearGaussian
        est = GaussianPosterior(seed=0, max_epochs=1, embedding={spec!r})
        est.setup(LinearGaussian.make().context())
        est.load(sys.argv[1])
        data = np.load(sys.argv[1] + "/pairs.npz")
        np.save(sys.argv[1] + "/log_prob.npy", est.log_prob(data["theta"], {{"x": data["x"]}}))
    """)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(
        np.load(tmp_path / "log_prob.npy"), est.log_prob(theta, {"x": x}), rtol=0, atol=1e-6
    )


def loaded(tmp_path: Path, **kwargs) -> GaussianPosterior:
    est = GaussianPosterior(seed=0, **kwargs)
    est.setup(LG.context())
    est.load(str(tmp_path))
    return est


def test_k31_max_epochs_counts_every_launch(tmp_path: Path) -> None:
    store = store_of()
    trained(GaussianPosterior, store, max_epochs=3).save(str(tmp_path))
    done = loaded(tmp_path, max_epochs=3)
    asyncio.run(done.train(store.view()))  # the total is reached: no epoch
    assert done.total_epochs == 3 and done.status()["max_epochs"] == 3
    more = loaded(tmp_path, max_epochs=4)
    asyncio.run(more.train(store.view()))
    assert more.total_epochs == 4


def test_k31_a_worse_continuation_keeps_the_loaded_best_model(tmp_path: Path) -> None:
    store = store_of()
    first = trained(GaussianPosterior, store, max_epochs=4)
    first.save(str(tmp_path))
    best_epoch = first.status()["best_epoch"]
    assert best_epoch is not None and 1 <= best_epoch <= 4

    worse = loaded(tmp_path, max_epochs=7, lr=3.0)  # a changed lr takes effect on load
    assert worse._fit.lr == 3.0
    asyncio.run(worse.train(store.view()))
    assert worse.total_epochs == 7
    assert worse.status()["best_epoch"] == best_epoch  # no epoch beat the loaded best model
    assert same_state(worse._fit.best, first._fit.best)

    again = loaded(tmp_path, max_epochs=7)  # the same lr option: the saved rate continues
    assert again._fit.lr == first._fit.lr
