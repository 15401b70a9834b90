"""What the observation guards find, and the warning texts they give.

A :class:`Finding` is one feature of an observation unlike the training data (constant in
training, far outside it) or one parameter whose draws lie at the edge of the prior's support;
:func:`describe` turns the findings of one observation into one message per kind. The checks
that make them are in :mod:`~kestrel_torch.estimators._guards`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["EDGE_FRACTION", "EDGE_Z", "FAR_Z", "Finding", "describe"]

#: z-score beyond which a feature outside the training range counts as far from it
FAR_Z = 5.0
#: |z| in the prior's standard-normal space beyond which the prior holds ~1e-15 of its mass
EDGE_Z = 8.0
#: fraction of draws beyond EDGE_Z that makes an "edge" finding
EDGE_FRACTION = 0.01
#: features named in one warning (the farthest first); the rest are counted
_SHOWN = 5


@dataclass(frozen=True)
class Finding:
    """One feature of an observation unlike the training data.

    Attributes:
        kind: ``"constant"`` (constant in training), ``"far"`` (far outside the training data)
            or ``"edge"`` (the draws for it lie at the edge of the prior's support; then
            ``feature`` is the parameter's index, ``value`` the fraction of draws there and
            ``z`` the largest ``|z|`` in the prior's standard-normal space).
        feature: index of the feature in the embedding (or in the flattened input of the
            normalisation layer ``where`` names).
        label: the feature for people: ``"x[2]"`` (identity embedding), ``"embedding feature
            2"``, or ``"<layer> input 2"``.
        value: the observation's value of the feature.
        mean, std: the training data's running mean and standard deviation of the feature.
        z: ``(value − mean) / std`` (``None`` for a constant feature).
        lo, hi: the range of the training rows (``None`` where unknown).
        differs: for ``constant``: whether the observation holds another value than the constant.
        where: ``"embedding"``, or the path of the normalisation layer inside it.
        row: for a batch of observations (conditions made of runs of identical rows, as
            batched sampling gives), the observation's index among the call's runs; ``None``
            for a broadcast observation. A batch drawn in several calls is numbered again by
            observation index by its caller (``kestrel.sample._guard_rows.renumber``).
    """

    kind: str
    feature: int
    label: str
    value: float
    mean: float
    std: float
    z: float | None = None
    lo: float | None = None
    hi: float | None = None
    differs: bool = False
    where: str = "embedding"
    row: int | None = None

    def as_dict(self, node: str) -> dict[str, Any]:
        """JSON-ready record with the node's name (non-finite numbers become ``None``)."""
        out: dict[str, Any] = {"node": node}
        for key, value in asdict(self).items():
            out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
        return out


def _num(x: float) -> str:
    return f"{x:.4g}"


def describe(node: str, findings: Sequence[Finding]) -> list[tuple[str, list[Finding]]]:
    """Warning texts for the findings of one observation: one per kind present.

    Args:
        node: the estimator's node. findings: from :func:`check_observation`.

    Returns:
        ``(message, the findings it reports)`` pairs; each message starts with
        ``node '<node>':`` (``node '<node>': observation row <r>:`` for the findings of row r of
        a batch, one group of messages per row).
    """
    rows: list[int | None] = []
    for f in findings:
        if f.row not in rows:
            rows.append(f.row)
    out: list[tuple[str, list[Finding]]] = []
    for row in rows:
        head = f"node {node!r}:" if row is None else f"node {node!r}: observation row {row}:"
        out += _describe_one(head, [f for f in findings if f.row == row])
    return out


def _describe_one(head: str, findings: Sequence[Finding]) -> list[tuple[str, list[Finding]]]:
    out: list[tuple[str, list[Finding]]] = []
    differs = [f for f in findings if f.kind == "constant" and f.differs]
    same = [f for f in findings if f.kind == "constant" and not f.differs]
    far = sorted((f for f in findings if f.kind == "far"), key=lambda f: -abs(f.z or 0.0))
    if differs:
        items = ", ".join(
            f"{f.label} (always {_num(f.mean)} in training, {_num(f.value)} observed)"
            for f in differs[:_SHOWN]
        )
        out.append(
            (
                f"{head} {_count(differs, 'feature')} constant in the training data "
                f"while the observation differs from it: {items}{_more(differs)}; the simulator "
                "never produced the observed value. The feature is left out of the "
                "standardisation (it carries no information): the posterior ignores it",
                differs,
            )
        )
    if same:
        items = ", ".join(f"{f.label} (always {_num(f.mean)})" for f in same[:_SHOWN])
        out.append(
            (
                f"{head} {_count(same, 'feature')} constant in the training data: "
                f"{items}{_more(same)}; left out of the standardisation (it carries no "
                "information)",
                same,
            )
        )
    if far:
        items = ", ".join(
            f"{f.label} = {_num(f.value)} (z = {f.z:+.1f}; training range "
            f"{_range(f)}, mean {_num(f.mean)}, std {_num(f.std)})"
            for f in far[:_SHOWN]
        )
        out.append(
            (
                f"{head} the observation lies far outside the training data "
                f"(|z| > {FAR_Z:g} and outside the range of every training row): {items}"
                f"{_more(far)}; the posterior there is an extrapolation",
                far,
            )
        )
    edge = [f for f in findings if f.kind == "edge"]
    if edge:
        # no numbers in the text: draws differ from call to call, the warning is given once
        items = ", ".join(f.label for f in edge[:_SHOWN])
        out.append(
            (
                f"{head} draws lie at the edge of the prior's support, where the prior "
                f"has almost no mass (more than {100 * EDGE_FRACTION:g} % of them beyond "
                f"{EDGE_Z:g} prior σ for {items}{_more(edge)}); they sit on the prior's bounds "
                "or far in its tails. The estimator has not learned a posterior for this "
                "observation: it is unlike the training data, or training has not converged",
                edge,
            )
        )
    return out


def _count(found: Sequence[Finding], what: str) -> str:
    return f"{len(found)} {what}{'s are' if len(found) > 1 else ' is'}"


def _more(found: Sequence[Finding]) -> str:
    return f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""


def _range(f: Finding) -> str:
    return "unknown" if f.lo is None or f.hi is None else f"[{_num(f.lo)}, {_num(f.hi)}]"
