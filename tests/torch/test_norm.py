"""RunningNorm: running statistics, train/eval behaviour, state (K21)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from kestrel_torch import RunningNorm


def mixture_stats(batches, momentum):
    """Oracle: the statistics as an explicit weighted mixture of all batches seen."""
    weights = [1.0]
    for _ in batches[1:]:
        weights = [w * (1 - momentum) for w in weights] + [momentum]
    means = np.array([b.mean(0) for b in batches])
    second = np.array([(b**2).mean(0) for b in batches])
    w = np.array(weights)[:, None]
    mean = (w * means).sum(0)
    return mean, (w * second).sum(0) - mean**2


def test_statistics_follow_the_weighted_mixture():
    rng = np.random.default_rng(1)
    batches = [rng.normal(loc=i, scale=1 + i, size=(32, 3)) for i in range(4)]
    norm = RunningNorm(momentum=0.3)
    for b in batches:
        norm(torch.from_numpy(b))
    mean, var = mixture_stats(batches, 0.3)
    np.testing.assert_allclose(norm.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), var, rtol=1e-12)
    assert norm.mean.dtype == torch.float64 and int(norm.count) == 4


def test_output_normalised_in_input_dtype_and_inverse():
    x = torch.randn(64, 2, 3, dtype=torch.float32) * 5 + 2
    norm = RunningNorm(momentum=1.0, eps=0.0)
    y = norm(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    torch.testing.assert_close(y.mean(0), torch.zeros(2, 3), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(0, unbiased=False), torch.ones(2, 3), atol=1e-4, rtol=0)
    torch.testing.assert_close(norm.inverse(y), x, atol=1e-4, rtol=1e-5)


def test_fresh_module_in_eval_mode_is_identity_and_stateless():
    norm = RunningNorm().eval()
    x = torch.randn(4, 3)
    assert torch.equal(norm(x), x) and torch.equal(norm.inverse(x), x)
    assert not norm.fitted and norm.mean.numel() == 0


def test_non_finite_rows_left_out():
    x = torch.tensor(
        [[1.0, 2.0], [3.0, 4.0], [float("nan"), 0.0], [float("inf"), 1.0]], dtype=torch.float64
    )
    norm = RunningNorm(momentum=1.0)
    norm(x)
    torch.testing.assert_close(norm.mean, torch.tensor([2.0, 3.0], dtype=torch.float64))
    torch.testing.assert_close(norm.var, torch.tensor([1.0, 1.0], dtype=torch.float64))
    state = copy.deepcopy(norm.state_dict())
    norm.momentum = 0.5
    norm(torch.full((3, 2), float("nan"), dtype=torch.float64))  # nothing finite: no change
    for key, value in norm.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_k21_validation_changes_nothing_and_no_gradient_through_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(RunningNorm(momentum=0.1), nn.Linear(3, 1))
    train_x = torch.randn(64, 3) * 4 + 1
    model(train_x)  # fit the statistics
    val_x, val_y = torch.randn(32, 3) * 4 + 1, torch.randn(32, 1)
    before = copy.deepcopy(model.state_dict())

    model.eval()
    with torch.no_grad():
        loss1 = nn.functional.mse_loss(model(val_x), val_y)
        loss2 = nn.functional.mse_loss(model(val_x), val_y)
    assert loss1.item() == loss2.item()
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), f"validation changed {key}"

    model.train()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    optimiser.zero_grad()
    nn.functional.mse_loss(model(train_x + 1.0), torch.zeros(64, 1)).backward()
    optimiser.step()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"0.mean", "0.var", "0.count", "1.weight", "1.bias"}
    assert not any(t.requires_grad for t in model[0].buffers())


def test_k21_gradient_treats_statistics_as_constants():
    x = (torch.randn(16, 2, dtype=torch.float64) * 3).requires_grad_()
    norm = RunningNorm(momentum=1.0)
    norm(x).sum().backward()  # with gradient through the batch statistics this would be ~0
    expected = torch.rsqrt(norm.var + norm.eps).expand(16, 2)
    torch.testing.assert_close(x.grad, expected)


def test_state_loads_into_a_fresh_module_and_copies():
    norm = RunningNorm(momentum=0.5)
    for _ in range(3):
        norm(torch.randn(8, 4) * 2 + 1)
    fresh = RunningNorm(momentum=0.5)
    fresh.load_state_dict(norm.state_dict())
    x = torch.randn(5, 4)
    norm.eval()
    fresh.eval()
    torch.testing.assert_close(fresh(x), norm(x))
    clone = copy.deepcopy(norm)
    torch.testing.assert_close(clone(x), norm(x))


def test_bad_arguments():
    with pytest.raises(ValueError, match="momentum=0"):
        RunningNorm(momentum=0)
    with pytest.raises(ValueError, match="eps=-1"):
        RunningNorm(eps=-1)
