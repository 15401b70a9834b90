"""Guards for observations unlike the training data, checked at every sampling call.

Shape symbols: E embedding width.

An estimator only knows the data it was trained on. Where the observation lies outside them its
posterior is an extrapolation, and nothing in the draws shows it. Two checks compare the
observation's **embedding** ``s`` (what the head is conditioned on) with the statistics the
head whitens ``s`` by — the float64 running mean, standard deviation and range ``[lo, hi]``
of the training rows (:class:`~kestrel_torch.nets._moments.RunningMoments`):

* **constant**: a feature that did not vary in training
  (:func:`~kestrel_torch.nets._moments.constant_features`) is left out of the whitening, so it
  carries no information; the finding says so, and says whether the observation holds another
  value (the simulator never produced it). The inputs of every
  :class:`~kestrel_torch.RunningNorm` inside the embedding are checked the same way.
* **far**: feature ``j`` lies far outside the training data when the observation's ``s_j`` is
  outside the range ``[lo_j, hi_j]`` of every training row seen **and** its z-score
  ``|s_j − mean_j| / std_j`` exceeds :data:`FAR_Z`. The range makes the test hold for skewed
  and heavy-tailed features (a value the training data reached never warns, whatever its
  z-score); the z-score bound makes it independent of the buffer's size (the range of many
  rows reaches a few standard deviations, so a value just beyond it is not yet far) and keeps
  false alarms rare with many features (for Gaussian features ``P(|z| > 5) ≈ 6·10⁻⁷`` each).
  It costs two comparisons per feature, on statistics that exist anyway. A checkpoint written
  before the range was kept has an unknown range; then the z-score alone decides.

Both run on a broadcast observation (one row of conditions, what every observation-conditioned
sampling call gives), and on each observation of a batch (``kestrel sample --observation`` with
``(m, *D)`` rows: conditions made of runs of identical rows, each observation repeated for its
draws), the findings then naming the observation's row; per-row conditions (n
different rows, none repeated) are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from kestrel_torch.estimators._findings import EDGE_FRACTION, EDGE_Z, FAR_Z, Finding, describe
from kestrel_torch.nets._model import EstimatorModel
from kestrel_torch.nets._moments import RunningMoments, constant_features
from kestrel_torch.nets._norm import RunningNorm

__all__ = ["EDGE_Z", "FAR_Z", "Finding", "check_observation", "describe", "edge_findings"]


def edge_findings(z: torch.Tensor, labels: Sequence[str]) -> list[Finding]:
    """Parameters for which more than :data:`EDGE_FRACTION` of the draws ``z`` ``(n, D)`` (in
    the prior's standard-normal space) lie beyond :data:`EDGE_Z`, where the prior holds
    ~1e-15 of its mass: a uniform prior maps them onto its bound. A posterior never puts
    mass there; an estimator extrapolating far from its training data does.

    Args:
        z: float ``(n, D)``. labels: a name per parameter (D).
    """
    if z.shape[0] == 0:
        return []
    far = z.abs() > EDGE_Z
    fraction = far.to(torch.float64).mean(0)
    biggest = z.abs().max(0).values
    return [
        Finding("edge", d, labels[d], float(fraction[d]), 0.0, 1.0, z=float(biggest[d]))
        for d in range(z.shape[1])
        if float(fraction[d]) > EDGE_FRACTION
    ]


class FeatureLabels(Sequence[str]):
    """A label per embedding feature, made only for the features asked for (an observation of
    10⁵ features is checked at every proposal draw): ``"x[2]"`` for the identity embedding
    (flattened inputs in order), ``"embedding feature 2"`` for a module's output."""

    def __init__(self, embedding: nn.Module, inputs: Mapping[str, torch.Tensor | None], width: int):
        self._width = int(width)
        self._parts: list[tuple[str, tuple[int, ...], int]] = []  # (node, shape, first feature)
        names = getattr(embedding, "inputs", ())
        if getattr(embedding, "net", "module") is not None or not names:
            return
        start = 0
        for name in names:
            tensor = inputs.get(name)
            if tensor is None:
                continue
            shape = tuple(int(d) for d in tensor.shape[1:])
            self._parts.append((name, shape, start))
            start += int(np.prod(shape, dtype=np.int64))
        if start != self._width:
            self._parts = []

    def __len__(self) -> int:
        return self._width

    def __getitem__(self, j: Any) -> Any:
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(self._width))]
        j = int(j)
        for name, shape, start in reversed(self._parts):
            if j >= start:
                if not shape:
                    return name
                index = np.unravel_index(j - start, shape)
                return f"{name}[{', '.join(str(int(k)) for k in index)}]"
        return f"embedding feature {j}"


def feature_labels(
    embedding: nn.Module, inputs: Mapping[str, torch.Tensor | None], width: int
) -> Sequence[str]:
    """:class:`FeatureLabels` of an embedding's ``width`` features."""
    return FeatureLabels(embedding, inputs, width)


def _stats_findings(stats: RunningMoments, s: torch.Tensor, labels: Sequence[str]) -> list[Finding]:
    """Constant and far features of one embedding row against the head's statistics."""
    if int(stats.count) == 0:
        return []
    value = s.detach().to(torch.float64).reshape(-1).cpu()
    mean, std = stats.mean.cpu(), stats.std.cpu()
    lo, hi = stats.lo.cpu(), stats.hi.cpu()
    var = torch.diagonal(stats.cov) if stats.full else stats.cov
    constant = constant_features(mean, var.cpu())
    known = lo <= hi
    z = (value - mean) / std
    outside = ~known | (value < lo) | (value > hi)
    far = ~constant & outside & (z.abs() > FAR_Z)
    found = []
    for j in torch.nonzero(constant | far).flatten().tolist():
        is_constant = bool(constant[j])
        found.append(
            Finding(
                kind="constant" if is_constant else "far",
                feature=j,
                label=labels[j],
                value=float(value[j]),
                mean=float(mean[j]),
                std=float(var[j].clamp_min(0.0).sqrt()) if is_constant else float(std[j]),
                z=None if is_constant else float(z[j]),
                lo=float(lo[j]) if bool(known[j]) else None,
                hi=float(hi[j]) if bool(known[j]) else None,
                differs=is_constant and bool(_differs(value[j], mean[j])),
            )
        )
    return found


def _differs(value: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """Whether a value is another than a constant feature's (beyond float64 rounding)."""
    return (value - mean).abs() > 1e-9 * torch.maximum(mean.abs(), value.abs())


def _norm_findings(path: str, norm: RunningNorm, x: torch.Tensor) -> list[Finding]:
    """Constant inputs of a RunningNorm layer inside the embedding, for one row ``x``."""
    if not norm.fitted:
        return []
    mean, var = norm.mean.reshape(-1).cpu(), norm.var.reshape(-1).cpu()
    constant = constant_features(mean, var)
    if not bool(constant.any()):
        return []
    value = x.detach().to(torch.float64).reshape(-1).cpu()
    if value.numel() != mean.numel():
        return []
    return [
        Finding(
            kind="constant",
            feature=j,
            label=f"{path} input {j}",
            value=float(value[j]),
            mean=float(mean[j]),
            std=float(var[j].clamp_min(0.0).sqrt()),
            differs=bool(_differs(value[j], mean[j])),
            where=path,
        )
        for j in torch.nonzero(constant).flatten().tolist()
    ]


def observation_runs(s: torch.Tensor) -> list[tuple[int, int]]:
    """The runs ``[start, end)`` of identical consecutive rows of an embedding ``(M, E)`` — the
    observations of a batch, each repeated for its draws — or ``[]`` when no row repeats
    (per-row conditions, not checked) or M = 1."""
    m = int(s.shape[0])
    if m < 2:
        return []
    flat = s.detach().reshape(m, -1)
    same = (flat[1:] == flat[:-1]) | (torch.isnan(flat[1:]) & torch.isnan(flat[:-1]))
    cut = (torch.nonzero(~same.all(1)).flatten() + 1).tolist()
    if len(cut) + 1 == m:
        return []
    bounds = [0, *cut, m]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def embed_checked(
    model: EstimatorModel, inputs: Mapping[str, torch.Tensor | None]
) -> tuple[torch.Tensor, list[Finding]]:
    """Embed conditions and check the observations they hold against the training data.

    Args:
        model: an eval-mode :class:`~kestrel_torch.nets._model.EstimatorModel` (``embed``, ``embedding``,
            and a head whose ``context_stats`` are the embedding's running statistics).
        inputs: condition node → tensor ``(M, *D)``, as for ``model.embed``.

    Returns:
        ``(s, findings)``: the embedding ``(M, E)`` and what :func:`check_observation` finds:
        for M = 1 on the observation; for a batch of observations (M > 1 rows made of runs of
        identical rows, :func:`observation_runs`) on each run, the findings carrying the run's
        index as ``row``; empty for per-row conditions (no row repeats).
    """
    norms = [
        (f"embedding.{path}" if path else "embedding", m)
        for path, m in model.embedding.named_modules()
        if isinstance(m, RunningNorm)
    ]
    seen: list[tuple[str, RunningNorm, torch.Tensor]] = []
    hooks = [
        m.register_forward_pre_hook(lambda mod, args, path=path: seen.append((path, mod, args[0])))
        for path, m in norms
    ]
    try:
        s = model.embed(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    if s.shape[0] == 1:
        runs: list[tuple[int, int]] = [(0, 1)]
    else:
        runs = observation_runs(s)
    found = []
    for row, (a, _) in enumerate(runs):
        one: list[Finding] = []
        for path, norm, x in seen:
            if isinstance(x, torch.Tensor) and x.shape[:1] in ((1,), (s.shape[0],)):
                one += _norm_findings(path, norm, x[:1] if x.shape[0] == 1 else x[a : a + 1])
        one += check_observation(model, s[a : a + 1], inputs)
        found += one if s.shape[0] == 1 else [replace(f, row=row) for f in one]
    return s, found


def check_observation(
    model: EstimatorModel, s: torch.Tensor, inputs: Mapping[str, torch.Tensor | None]
) -> list[Finding]:
    """Constant and far features of one embedded observation (see the module docstring).

    Args:
        model: the model (its head's ``context_stats``: a
            :class:`~kestrel_torch.nets._moments.RunningMoments`; a head without them is not checked).
        s: the observation's embedding ``(1, E)``.
        inputs: the conditions it was embedded from (for the features' labels).

    Returns:
        The findings, constant features first, then far ones (feature order).
    """
    stats = getattr(model.head, "context_stats", None)
    if not isinstance(stats, RunningMoments) or s.shape[0] != 1 or s.shape[1] != stats.dim:
        return []
    labels = feature_labels(model.embedding, inputs, int(s.shape[1]))
    found = _stats_findings(stats, s, labels)
    return sorted(found, key=lambda f: (f.kind != "constant", f.feature))
