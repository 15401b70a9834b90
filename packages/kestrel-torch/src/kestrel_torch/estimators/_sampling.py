"""Sampling and densities in θ-space, and the conditions they are given.

Shape symbols: n draws, N values, M rows of conditions (1 for a broadcast observation, else n
or N), F all parameters of the latent node, D its free parameters.

A head draws and scores in the prior's standard-normal space; here its draws are mapped back
through ``prior.from_normal`` — which lands in the prior's support by construction — and
densities get the Jacobian: ``log p(θ) = log p(z) + log|det ∂z/∂θ|``. Conditions arrive as
arrays (or tensors) with a leading dimension of 1 (broadcast) or n; :class:`Conditions` checks
them against the rows the model was built from and puts them on the device without copying a
broadcast observation n times; a condition holding NaN or ±inf is refused there.

Every draw checks a broadcast observation — and each observation of a batch, runs of identical
condition rows, its findings naming the row — against the training data
(:mod:`~kestrel_torch.estimators._guards`: features constant in training, an observation far outside
it); what it finds is warned about once (an :class:`~kestrel_core.graph._observe.ObservationWarning`
per kind) and kept in :attr:`Conditions.findings`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from kestrel_core import EstimatorContext, ObservationWarning, Record
from kestrel_core.internal import COMPLEX_HINT, as_input, check_finite_observation
from kestrel_torch._errors import EstimatorError
from kestrel_torch.estimators._guards import (
    Finding,
    describe,
    edge_findings,
    embed_checked,
    observation_runs,
)
from kestrel_torch.nets._model import EstimatorModel

__all__ = ["Conditions", "draw", "log_density", "prior_draws"]


class Conditions:
    """Turns ``conditions`` mappings into the model's input tensors.

    Args:
        context: the node (its evidence and scaffolds). device: where the model lives.
        templates: condition node → tensor ``(k, *shape)`` of the rows the model was built from;
            each condition must have that per-row shape, and is converted to that dtype.

    Attributes:
        findings: what the guards found for the observation of the latest draw with a
            broadcast observation (JSON-ready dicts, see
            :meth:`~kestrel_torch.estimators._guards.Finding.as_dict`; empty when it is like the training
            data).
    """

    def __init__(
        self, context: EstimatorContext, device: torch.device, templates: Mapping[str, torch.Tensor]
    ) -> None:
        self.context, self.device, self.templates = context, device, templates
        self.findings: list[dict[str, Any]] = []
        self._warned: set[str] = set()

    def note(self, found: list[Finding]) -> None:
        """Keep the findings of a checked observation and warn once per distinct message."""
        node = self.context.node
        self.findings = [f.as_dict(node) for f in found]
        for message, reported in describe(node, found):
            if message not in self._warned:
                self._warned.add(message)
                records = [f.as_dict(node) for f in reported]
                warnings.warn(ObservationWarning(message, records), stacklevel=2)

    def inputs(self, n: int, conditions: Mapping[str, Any]) -> dict[str, torch.Tensor | None]:
        """Evidence tensors on the device with leading dimension 1 (all broadcast) or ``n``;
        scaffolds are ``None`` (never used at inference), other nodes ignored.

        Raises:
            EstimatorError: ``conditions`` is not a mapping, or an evidence node is missing or
                mis-shaped (the message names it and the shapes expected).
        """
        context = self.context
        if not isinstance(conditions, Mapping):
            raise EstimatorError(
                f"node {context.node!r}: conditions must map node names to arrays, "
                f"got {type(conditions).__name__}"
            )
        tensors: dict[str, torch.Tensor] = {}
        for c in context.evidence:
            if c not in conditions:
                raise EstimatorError(
                    f"node {context.node!r}: condition {c!r} is missing (evidence: "
                    f"{list(context.evidence)}; given: {sorted(map(str, conditions))})"
                )
            tensors[c] = self.tensor(c, conditions[c], n)
        rows = n if any(t.shape[0] == n for t in tensors.values()) else 1
        inputs: dict[str, torch.Tensor | None] = {
            c: t.expand(rows, *t.shape[1:]) if t.shape[0] != rows else t for c, t in tensors.items()
        }
        for c in context.scaffolds:
            inputs[c] = None
        return inputs

    def tensor(self, name: str, value: Any, n: int) -> torch.Tensor:
        """One condition as a tensor ``(1 or n, *shape)`` on the device, in the template's dtype.

        Arrays of any byte order and strides are accepted: they pass the same normalisation as
        every array entering a run (:func:`kestrel_core.graph._inputs.as_input`).

        Raises:
            EstimatorError: a per-row shape other than the template's, a leading dimension
                other than 1 or ``n``, a non-numeric or complex array, a masked array with masked
                entries, or a NaN or ±inf (the message
                names the node, the condition, the index and the value).
        """
        node = self.context.node
        template = self.templates.get(name)
        shape = tuple(template.shape[1:]) if template is not None else None
        # the one rule for arrays entering a run (native byte order, C-contiguous, real numeric,
        # no masked entries)
        what = f"node {node!r}: condition {name!r}"
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            if tensor.is_complex():
                raise EstimatorError(f"{what} has complex dtype {tensor.dtype}; {COMPLEX_HINT}")
        else:
            if isinstance(value, np.ma.MaskedArray):  # before np.asarray drops the mask
                value = as_input(value, what, copy=False, error=EstimatorError)
            array = np.asarray(value)
            if array.ndim and array.shape[0] > 1 and array.strides[0] == 0:
                array = array[:1]  # a broadcast view: keep one row, expand on the device
            array = as_input(array, what, copy=False, error=EstimatorError)
            if not array.flags.writeable:
                array = array.copy()
            tensor = torch.from_numpy(array)
        if tensor.dim() == 0 or (shape is not None and tuple(tensor.shape[1:]) != shape):
            expected = (
                f"{(1, *shape)} (broadcast) or {(n, *shape)}"
                if shape is not None
                else "a leading batch axis"
            )
            raise EstimatorError(
                f"node {node!r}: condition {name!r} has shape {tuple(tensor.shape)}; "
                f"expected {expected}"
            )
        k = tensor.shape[0]
        if k not in (1, n):
            raise EstimatorError(
                f"node {node!r}: condition {name!r} has leading dimension {k}; "
                f"expected 1 (broadcast) or {n}"
            )
        if (tensor.is_floating_point() or tensor.is_complex()) and not bool(
            torch.isfinite(tensor).all()
        ):
            values = tensor.cpu().numpy()
            what = f"condition {name!r}" + (f" (shape {tuple(values.shape)})" if k > 1 else "")
            check_finite_observation(node, values[0] if k == 1 else values, what, EstimatorError)
        dtype = template.dtype if template is not None else None
        return tensor.to(device=self.device, dtype=dtype)


def prior_draws(prior: Any, n: int, rng: np.random.Generator) -> Record:
    """``n`` prior draws: ``{"value": float64 (n, F), "log_prob": float64 (n,)}``."""
    theta = np.asarray(prior.sample(n, rng), dtype=np.float64)
    return {"value": theta, "log_prob": np.asarray(prior.log_prob(theta), dtype=np.float64)}


@torch.no_grad()
def draw(
    model: EstimatorModel,
    prior: Any,
    n: int,
    conditions: Conditions,
    given: Mapping[str, Any],
    gamma: float,
    generator: torch.Generator | None,
) -> Record:
    """``n`` draws from the model's γ-tempered posterior (γ = 1: the posterior) in θ-space.

    Args:
        model: an eval-mode model. prior: the node's prior. n: draws (0: no condition is read).
        conditions: the model's :class:`Conditions`. given: the conditions, as for
            :meth:`Conditions.inputs`. gamma: > 0. generator: for the draws.

    Returns:
        ``{"value": float64 (n, F), "log_prob": float64 (n,)}``, ``log_prob`` the θ-space
        density of the distribution drawn from.

    Raises:
        EstimatorError: a missing or mis-shaped condition.

    Warns:
        ObservationWarning: a broadcast observation, or an observation of a batch (its row
            named), unlike the training data
            (:mod:`~kestrel_torch.estimators._guards`), once per message for ``conditions``.
    """
    if n == 0:
        return {"value": np.empty((0, prior.full_dim)), "log_prob": np.empty(0)}
    s, found = embed_checked(model, conditions.inputs(n, given))
    z, log_z = model.head.sample(s, n, gamma, generator)
    runs = [(0, n)] if s.shape[0] == 1 else observation_runs(s)
    if runs:
        names = getattr(prior, "names", None) or ()
        labels = [names[d] if d < len(names) else f"parameter {d}" for d in range(z.shape[1])]
        edges = []
        for row, (a, b) in enumerate(runs):
            edge = edge_findings(z[a:b], labels)
            edges += edge if s.shape[0] == 1 else [replace(f, row=row) for f in edge]
        conditions.note(found + edges)
    theta, log_dtheta = prior.from_normal(z.cpu().numpy(), with_logdet=True)
    log_prob = log_z.cpu().numpy() - log_dtheta
    return {
        "value": np.asarray(theta, dtype=np.float64),
        "log_prob": np.asarray(log_prob, dtype=np.float64),
    }


@torch.no_grad()
def log_density(
    model: EstimatorModel,
    prior: Any,
    theta: np.ndarray,
    conditions: Conditions,
    given: Mapping[str, Any],
) -> np.ndarray:
    """The model's posterior log density at ``theta`` ``(N, F)``: float64 ``(N,)``, θ-space.

    A row where the prior's density is zero — outside its support, NaN or ±inf — gets ``-inf``
    (the posterior is zero there, as MCMC and importance weights need), row by row: the other
    rows are computed as they are without it, bit for bit (the row is scored at the prior's
    median instead, in a batch of the same size, and its result replaced).

    Raises:
        EstimatorError: a missing or mis-shaped condition.
        ShapeError: ``theta``'s last axis is not the prior's ``F``.
    """
    outside = ~np.isfinite(np.asarray(prior.log_prob(theta), dtype=np.float64))
    if outside.any():
        theta = np.array(theta, dtype=np.float64)
        theta[outside] = prior.from_normal(np.zeros((1, prior.dim)))[0]  # in the support
    z, logdet = prior.to_normal(theta, with_logdet=True)
    s = model.embed(conditions.inputs(theta.shape[0], given))
    log_z = model.head.log_prob(torch.as_tensor(z, device=conditions.device), s)
    out = log_z.cpu().numpy() + logdet
    out[outside] = -np.inf
    return out
