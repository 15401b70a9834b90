"""kestrel_core.c2st: the classifier two-sample test (scikit-learn, an optional dependency)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kestrel_core
from kestrel_core import c2st


def _sklearn():
    return pytest.importorskip("sklearn", reason="kestrel-core[diagnostics] not installed")


def test_identical_distributions_score_about_one_half():
    _sklearn()
    rng = np.random.default_rng(0)
    score = c2st(rng.normal(size=(600, 2)), rng.normal(size=(600, 2)))
    assert 0.44 <= score <= 0.56, score


def test_well_separated_distributions_score_about_one():
    _sklearn()
    rng = np.random.default_rng(1)
    score = c2st(rng.normal(size=(400, 3)), rng.normal(size=(400, 3)) + 8.0)
    assert score >= 0.98, score


def test_a_mean_shift_of_one_sigma_scores_between():
    # one standard deviation apart in one dimension: the best classifier reaches Φ(0.5) ≈ 0.69
    _sklearn()
    rng = np.random.default_rng(2)
    shifted = rng.normal(size=(1000, 2)) + [1.0, 0.0]
    score = c2st(rng.normal(size=(1000, 2)), shifted)
    assert 0.62 <= score <= 0.74, score


def test_standardised_with_the_reference_so_scale_does_not_matter():
    _sklearn()
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(300, 2)), rng.normal(size=(300, 2)) + [0.5, 0.0]
    assert c2st(a * 1e-4, b * 1e-4) == c2st(a, b)


def test_unequal_sizes_are_subsampled_and_one_d_is_accepted():
    _sklearn()
    rng = np.random.default_rng(4)
    score = c2st(rng.normal(size=700), rng.normal(size=(300, 1)))
    assert 0.4 <= score <= 0.6, score


@pytest.mark.parametrize(
    "reference, samples, message",
    [
        (np.zeros((10, 2)), np.zeros((10, 3)), "2 dimensions per row, samples 3"),
        (np.zeros((10, 2)), np.full((10, 2), np.nan), "non-finite value at row 0, column 0"),
        (np.zeros((3, 2)), np.zeros((3, 2)), "3 rows per set; at least folds=5"),
        (np.zeros((2, 0)), np.zeros((2, 0)), "must have shape (n, D)"),
    ],
)
def test_bad_inputs_are_refused(reference, samples, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        c2st(reference, samples)


def test_without_scikit_learn_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    monkeypatch.delitem(sys.modules, "sklearn.model_selection", raising=False)
    monkeypatch.delitem(sys.modules, "sklearn.neural_network", raising=False)
    with pytest.raises(ImportError, match=r"kestrel-core\[diagnostics\]"):
        c2st(np.zeros((10, 2)), np.ones((10, 2)))


def test_kestrel_core_imports_without_scikit_learn():
    code = "import sys, kestrel_core; assert 'sklearn' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    assert "c2st" in kestrel_core.__all__


def test_the_early_stopping_variant_scores_like_the_benchmark_and_is_sbis_classifier(monkeypatch):
    _sklearn()
    import kestrel_core.diagnostics._c2st as module

    rng = np.random.default_rng(2)
    reference, shifted = rng.normal(size=(1000, 2)), rng.normal(size=(1000, 2)) + [1.0, 0.0]
    assert 0.62 <= c2st(reference, shifted, early_stopping=True) <= 0.74
    assert 0.42 <= c2st(reference, rng.normal(size=(1000, 2)), early_stopping=True) <= 0.58

    made: list[dict] = []
    classifier, folds, cross_val_score = module._sklearn()

    def recording(estimator, *args, **kwargs):
        made.append(estimator.get_params())
        return cross_val_score(estimator, *args, **kwargs)

    monkeypatch.setattr(module, "_sklearn", lambda: (classifier, folds, recording))
    c2st(reference[:100], shifted[:100], early_stopping=True)
    c2st(reference[:100], shifted[:100])
    fast, benchmark = made
    assert (fast["max_iter"], fast["early_stopping"], fast["n_iter_no_change"]) == (1000, True, 50)
    assert (benchmark["max_iter"], benchmark["early_stopping"]) == (10_000, False)
