"""C2ST: the classifier two-sample test, as the SBI benchmark scores posteriors with it.

Lopez-Paz & Oquab (2017), "Revisiting classifier two-sample tests"; the variant of Lueckmann
et al. (2021), "Benchmarking simulation-based inference": both sample sets are standardised with
the reference's mean and standard deviation, an MLP classifier (two hidden layers of ``10·D``
ReLU units, adam, at most 10 000 iterations) learns to tell them apart, and the score is its
mean held-out accuracy over a shuffled 5-fold cross-validation. 0.5: the classifier cannot tell
the sets apart (the posterior matches the reference); 1.0: it separates them completely.

That classifier stops only when its training loss stops falling, which for two sets it can
hardly tell apart in 10 dimensions is at the 10 000th epoch: about 11 min a fold on a 2-core
machine (0.065 s an epoch for 16 000 rows), an hour a score. ``early_stopping=True`` is sbi's MLP
variant (``sbi.utils.metrics.c2st(classifier="mlp")``): at most 1000 epochs, stopped after 50
without a better accuracy on a held-out tenth of the fold's training rows — 95 epochs, 6 s a fold
in the same 10-D case. Scores of the two variants are not interchangeable; compare like with like.

scikit-learn is an optional dependency (``pip install 'kestrel-core[diagnostics]'``), imported
only when :func:`c2st` is called: ``import kestrel_core`` works without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["c2st", "EXTRA"]

#: the install hint of the optional dependency
EXTRA = "pip install 'kestrel-core[diagnostics]'"


def _sklearn() -> tuple[Any, Any, Any]:
    """``(MLPClassifier, KFold, cross_val_score)``; ImportError naming the extra without it."""
    try:
        from sklearn.model_selection import KFold, cross_val_score
        from sklearn.neural_network import MLPClassifier
    except ImportError as err:
        raise ImportError(
            f"kestrel_core.c2st needs scikit-learn, which is not installed: {EXTRA}"
        ) from err
    return MLPClassifier, KFold, cross_val_score


def _rows(name: str, a: Any) -> np.ndarray:
    """``a`` as float64 ``(n, D)`` (a 1-D array is ``(n, 1)``); ValueError if not finite."""
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    elif arr.ndim > 2:
        arr = arr.reshape(len(arr), -1)
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise ValueError(f"c2st: {name} must have shape (n, D); got {np.shape(a)}")
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"c2st: {name} has a non-finite value at row {bad[0]}, column {bad[-1]}")
    return arr


def c2st(
    reference: Any,
    samples: ArrayLike,
    *,
    seed: int = 1,
    folds: int = 5,
    max_iter: int | None = None,
    hidden: int | None = None,
    early_stopping: bool = False,
) -> float:
    """Classifier two-sample test accuracy of ``samples`` against ``reference``.

    Both sets are standardised with the reference's mean and standard deviation (a constant
    reference feature is only centred) and classified in float32. When the sets differ in size, the larger one is
    subsampled at random (without replacement, with ``seed``) to the size of the smaller, so
    that 0.5 is chance level.

    Args:
        reference: reference posterior samples, array-like ``(n, D)`` (``(n,)`` for D = 1; more
            axes are flattened per row).
        samples: the samples to score, ``(m, D)`` with the same D.
        seed: seed of the subsampling, the fold shuffling and the classifier's initialisation.
        folds: folds of the cross-validation (≥ 2).
        max_iter: the classifier's maximum number of adam epochs (default 10 000; 1000 with
            ``early_stopping``).
        hidden: units of each of the two hidden layers (default ``10·D``).
        early_stopping: sbi's variant (see the module docstring): each fold's classifier holds
            out a tenth of its training rows and stops after 50 epochs without a better
            accuracy there; ``False`` (the default) is the benchmark's classifier.

    Returns:
        The mean held-out accuracy, a float in [0, 1]: ≈ 0.5 when the two sets come from the
        same distribution, ≈ 1.0 when they are fully separable.

    Raises:
        ImportError: scikit-learn is not installed (the message names
            ``kestrel-core[diagnostics]``).
        ValueError: a set is not ``(n, D)`` or holds a non-finite value, the dimensions differ,
            or there are fewer rows per set than ``folds``.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> c2st(rng.normal(size=(500, 2)), rng.normal(size=(500, 2)))  # doctest: +SKIP
        0.49...
    """
    ref = _rows("reference", reference)
    smp = _rows("samples", samples)
    if ref.shape[1] != smp.shape[1]:
        raise ValueError(
            f"c2st: reference has {ref.shape[1]} dimensions per row, samples {smp.shape[1]}"
        )
    if folds < 2:
        raise ValueError(f"c2st: folds must be >= 2; got {folds}")
    n = min(len(ref), len(smp))
    if n < folds:
        raise ValueError(f"c2st: {n} rows per set; at least folds={folds} are needed")
    MLPClassifier, KFold, cross_val_score = _sklearn()

    rng = np.random.default_rng(seed)
    if len(ref) > n:
        ref = ref[np.sort(rng.choice(len(ref), n, replace=False))]
    if len(smp) > n:
        smp = smp[np.sort(rng.choice(len(smp), n, replace=False))]
    mean, std = ref.mean(axis=0), ref.std(axis=0, ddof=1)
    std = np.where(std > 0, std, 1.0)
    # float32: scikit-learn then trains in float32, about 1.5x faster, with the same accuracy
    data = ((np.concatenate([ref, smp]) - mean) / std).astype(np.float32)
    labels = np.concatenate([np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)])

    width = hidden if hidden is not None else 10 * data.shape[1]
    stopping: dict[str, Any] = (
        {"early_stopping": True, "n_iter_no_change": 50} if early_stopping else {}
    )
    classifier = MLPClassifier(
        hidden_layer_sizes=(width, width),
        activation="relu",
        solver="adam",
        max_iter=max_iter if max_iter is not None else (1000 if early_stopping else 10_000),
        random_state=seed,
        **stopping,
    )
    split = KFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = cross_val_score(classifier, data, labels, cv=split, scoring="accuracy")
    return float(np.mean(scores))
