"""The buffer rules as a pure function: ``rotate``."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import LIVE, TRAINABLE, Status, rotate

V, T, D, X, DEL = (
    Status.VALIDATION,
    Status.TRAINING,
    Status.DISFAVOURED,
    Status.TOMBSTONE,
    Status.DELETED,
)


def counts(status: np.ndarray) -> tuple[int, int, int, int]:
    c = np.bincount(status, minlength=5)
    return int(c[V]), int(c[T]), int(c[D]), int(c[X] + c[DEL])


def append(status: np.ndarray, n: int, **cfg) -> np.ndarray:
    return rotate(np.concatenate([status, np.full(n, V, np.int8)]), **cfg)


def test_worked_example():
    cfg = {"min_samples": 4, "max_samples": 6, "validation_samples": 2}
    s = append(np.empty(0, np.int8), 6, **cfg)
    assert counts(s) == (2, 4, 0, 0)
    s[[0, 1, 2]] = D  # discard ids 0-2 (no rotation on discard)
    assert counts(s) == (2, 1, 3, 0)
    s = append(s, 2, **cfg)  # keep = 4 - 3 = 1 disfavoured: the newest, id 2
    assert counts(s) == (2, 3, 1, 2)
    assert s[:3].tolist() == [X, X, D]
    s = append(s, 2, **cfg)
    assert counts(s) == (2, 5, 0, 3)
    s = append(s, 4, **cfg)
    assert counts(s) == (2, 6, 0, 6)
    assert s.tolist() == [X] * 6 + [T] * 6 + [V] * 2  # oldest die first


def test_k22_validation_zero_promotes_every_sample():
    out = rotate(np.zeros(8, np.int8), min_samples=4, max_samples=8, validation_samples=0)
    assert out.tolist() == [T] * 8


def test_input_is_not_modified_and_output_is_int8():
    status = np.array([V, V, V, D, T], dtype=np.int64)
    copy = status.copy()
    out = rotate(status, min_samples=0, max_samples=1, validation_samples=1)
    assert status.tolist() == copy.tolist()
    assert out.dtype == np.int8 and out.shape == status.shape


def test_dead_statuses_are_untouched():
    status = np.array([X, DEL, X, DEL], np.int8)
    out = rotate(status, min_samples=10, max_samples=1, validation_samples=0)
    assert out.tolist() == status.tolist()


def test_disfavoured_survive_only_to_reach_min_samples():
    status = np.array([D, D, D, T, T], np.int8)
    out = rotate(status, min_samples=4, max_samples=10, validation_samples=0)
    assert out.tolist() == [X, D, D, T, T]  # keep = 4 - 2 = 2, the newest two
    out = rotate(status, min_samples=2, max_samples=10, validation_samples=0)
    assert out.tolist() == [X, X, X, T, T]  # enough training: every disfavoured dies


def test_max_samples_caps_training_only():
    status = np.array([T, D, T, T, V, V], np.int8)
    out = rotate(status, min_samples=5, max_samples=2, validation_samples=2)
    assert out.tolist() == [X, D, T, T, V, V]  # validation and disfavoured do not count


def test_validation_keeps_the_newest():
    out = rotate(
        np.array([V, T, V, V], np.int8), min_samples=0, max_samples=10, validation_samples=2
    )
    assert out.tolist() == [T, T, V, V]


@pytest.mark.parametrize("seed", range(5))
def test_random_histories_keep_the_invariants(seed):
    rng = np.random.default_rng(seed)
    cfg = {
        "min_samples": int(rng.integers(0, 8)),
        "max_samples": int(rng.integers(1, 12)),
        "validation_samples": int(rng.integers(0, 4)),
    }
    status = np.empty(0, np.int8)
    for _ in range(30):
        before = np.concatenate([status, np.full(int(rng.integers(1, 6)), V, np.int8)])
        status = rotate(before, **cfg)
        assert (status >= before).all()  # statuses only move forward
        v, t, d, _ = counts(status)
        assert v == min(cfg["validation_samples"], int(np.count_nonzero(before == V)))
        assert t <= cfg["max_samples"]
        if d:
            assert t < cfg["min_samples"] and t + d <= cfg["min_samples"]
        live = np.flatnonzero(status == V)
        if live.size:  # validation ids are the newest appended
            assert (np.flatnonzero(np.isin(status, TRAINABLE)) < live.min()).all()
        assert np.array_equal(rotate(status, **cfg), status)  # idempotent
        marked = rng.random(status.size) < 0.2  # the estimator discards some training samples
        status = np.where(marked & (status == T), np.int8(D), status).astype(np.int8)


def test_status_groups():
    assert set(LIVE) == {V, T, D}
    assert set(TRAINABLE) == {T, D}
