"""Ensembles of posterior estimators: a mixture weighted by validation log-probability.

An ensemble of K independently trained members (own seed, own validation split) is used as
the mixture

    q(θ | x) = Σ_k w_k q_k(θ | x),   w_k = exp(s_k) / Σ_j exp(s_j),

where ``s_k`` is member k's mean validation log-probability — the negative of its best
validation loss. This is the weighting of ltu-ili's ensemble posterior (Ho et al. 2024,
"LtU-ILI: An All-in-One Framework for Implicit Inference in Astrophysics and Cosmology"),
which ensembles sbi's estimators the same way (Lakshminarayanan et al. 2017 for deep
ensembles in general). A member that reports no validation loss makes every weight equal
(there is nothing to compare the members on).

:class:`EnsemblePosterior` is the mixture; :func:`pack_members` / :func:`unpack_members` are
the one file format of an ensemble (its members' checkpoints, behind a magic line), which
:class:`~kestrel_torch.StepwiseEstimator` reads and writes with ``load_bytes`` /
``save_bytes``, so a run's ``estimator.pt`` holds the whole ensemble and every reader of it
(``kestrel sample``, ``kestrel.open_run``, ``kestrel check calibration``) samples the mixture.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from kestrel_core import Record, check_count
from kestrel_torch._errors import EstimatorError
from kestrel_torch.checkpoint._state import CheckpointError

__all__ = [
    "EnsemblePosterior",
    "ensemble_weights",
    "pack_members",
    "unpack_members",
    "ENSEMBLE_MAGIC",
]

#: the first bytes of an ensemble checkpoint (a single estimator's checkpoint is a torch zip
#: file, which starts with ``PK``)
ENSEMBLE_MAGIC = b"KESTREL-ENSEMBLE-1\n"


def ensemble_weights(scores: Sequence[float | None]) -> np.ndarray:
    """The mixture weights of members with validation scores ``scores``.

    Args:
        scores: each member's mean validation log-probability (``−best_val_loss``); ``None``
            or NaN where a member has none.

    Returns:
        float64 ``(K,)``, ``softmax(scores)`` (sums to 1); equal weights when any score is
        missing.

    Raises:
        EstimatorError: no member.
    """
    if len(scores) == 0:
        raise EstimatorError("an ensemble needs at least one member")
    values = [math.nan if s is None else float(s) for s in scores]
    if any(math.isnan(v) for v in values):
        return np.full(len(values), 1.0 / len(values))
    s = np.asarray(values, dtype=np.float64)
    s = s - s.max() if np.isfinite(s.max()) else np.zeros_like(s)
    w = np.exp(s)
    return w / w.sum()


def pack_members(blobs: Sequence[bytes]) -> bytes:
    """One checkpoint holding every member's checkpoint bytes (member ``k`` at index ``k``)."""
    buffer = io.BytesIO()
    torch.save(
        {"members": [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]}, buffer
    )
    return ENSEMBLE_MAGIC + buffer.getvalue()


def unpack_members(data: bytes, *, source: str = "checkpoint bytes") -> list[bytes] | None:
    """The members' checkpoint bytes of a :func:`pack_members` checkpoint; ``None`` for a
    single estimator's checkpoint.

    Raises:
        CheckpointError: the bytes start like an ensemble checkpoint but cannot be read.
    """
    if not bytes(data[: len(ENSEMBLE_MAGIC)]) == ENSEMBLE_MAGIC:
        return None
    try:
        payload = torch.load(
            io.BytesIO(data[len(ENSEMBLE_MAGIC) :]), map_location="cpu", weights_only=True
        )
        return [t.numpy().tobytes() for t in payload["members"]]
    except Exception as err:  # unpickling errors have no common base class
        raise CheckpointError(f"cannot read the ensemble in {source}: {err}") from err


def _rows(conditions: Mapping[str, Any], index: np.ndarray) -> dict[str, Any]:
    """The condition rows of ``index`` (a broadcast ``(1, *D)`` condition stays as it is)."""
    out = {}
    for name, value in conditions.items():
        array = np.asarray(value)
        out[name] = array if array.shape[:1] == (1,) else array[index]
    return out


def _log_mix(log_w: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """``log Σ_k w_k q_k`` per column of ``log_q`` ``(K, N)``; ``-inf`` where every term is."""
    terms = log_w[:, None] + log_q
    top = terms.max(axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = safe + np.log(np.exp(terms - safe).sum(axis=0))
    return np.where(np.isneginf(top), -np.inf, out)


class EnsemblePosterior:
    """The mixture of K posterior estimators, weighted by validation log-probability.

    Shape symbols: n draws, N densities, F the latent node's parameters, K members.

    Args:
        members: K objects with ``sample_posterior(n, conditions, rng=)`` and
            ``log_prob(theta, conditions)`` as :class:`~kestrel_torch.StepwiseEstimator`'s
            (trained estimators; ``sample_proposal(n, conditions, rng=, round=)`` and
            ``sample_prior(n, rng)`` are used where called).
        scores: member ``k``'s mean validation log-probability ``s_k`` (``None``: read
            ``−status()["best_val_loss"]`` of each member); weights ``softmax(s)``, see
            :func:`ensemble_weights`.

    Attributes:
        members: as given. weights: float64 ``(K,)``, summing to 1.

    Raises:
        EstimatorError: no member, or ``scores`` of another length than ``members``.

    Example:
        ``EnsemblePosterior([est_a, est_b]).sample_posterior(1000, {"x": x_o[None]}, rng)``
    """

    def __init__(self, members: Sequence[Any], scores: Sequence[float | None] | None = None):
        self.members = list(members)
        if not self.members:
            raise EstimatorError("an ensemble needs at least one member")
        if scores is None:
            scores = [_score(m) for m in self.members]
        if len(scores) != len(self.members):
            raise EstimatorError(
                f"an ensemble of {len(self.members)} members got {len(scores)} scores"
            )
        self.scores = [None if s is None else float(s) for s in scores]
        self.weights = ensemble_weights(self.scores)

    def __len__(self) -> int:
        return len(self.members)

    def _split(self, n: int, weights: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        """The rows each member draws: row ``i`` goes to member ``k`` with probability
        ``weights[k]`` (one categorical draw per row, from ``rng``)."""
        which = rng.choice(len(self.members), size=n, p=weights)
        return [np.flatnonzero(which == k) for k in range(len(self.members))]

    def _draw(
        self,
        method: str,
        n: int,
        conditions: Mapping[str, Any],
        rng: np.random.Generator | None,
        weights: np.ndarray,
        **extra: Any,
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        n = check_count(n)
        rng = rng if rng is not None else np.random.default_rng()
        rows = self._split(n, weights, rng)
        children = rng.spawn(len(self.members))  # one stream per member, whatever its rows
        value: np.ndarray | None = None
        log_prob = np.zeros(n)
        for member, index, child in zip(self.members, rows, children):
            if index.size == 0:
                continue
            out = getattr(member, method)(
                int(index.size), _rows(conditions, index), rng=child, **extra
            )
            got = np.asarray(out["value"], dtype=np.float64)
            if value is None:
                value = np.empty((n, *got.shape[1:]), dtype=np.float64)
            value[index] = got
            log_prob[index] = np.asarray(out["log_prob"], dtype=np.float64)
        if value is None:  # n = 0
            value = np.asarray(
                getattr(self.members[0], method)(0, conditions, rng=children[0], **extra)["value"]
            )
        return value, log_prob, rows

    def sample_posterior(
        self, n: int, conditions: Mapping[str, Any], rng: np.random.Generator | None = None
    ) -> Record:
        """``n`` draws from the mixture: each row from member ``k`` with probability ``w_k``.

        Args:
            n: number of draws. conditions: evidence node → array ``(n, *D)`` or ``(1, *D)``
                (broadcast). rng: the call's generator (the members' rows and their draws
                follow it; ``None``: fresh entropy).

        Returns:
            ``{"value": float64 (n, F), "log_prob": float64 (n,)}``; ``log_prob`` is the
            mixture's θ-space log density (:meth:`log_prob`) at each draw.

        Raises:
            EstimatorError: a member cannot sample (not trained) or a mis-shaped condition.
        """
        value, _, _ = self._draw("sample_posterior", n, conditions, rng, self.weights)
        return {"value": value, "log_prob": self.log_prob(value, conditions)}

    def sample_proposal(
        self,
        n: int,
        conditions: Mapping[str, Any],
        rng: np.random.Generator | None = None,
        round: int | None = None,
    ) -> Record:
        """``n`` draws from the mixture of the members' proposals, with **equal** weights.

        A resimulation round's proposal is fixed while the members train (their validation
        scores still move, and a deterministic launch must not depend on when they are
        read), so every member proposes an equal share. Each row's ``log_prob`` is the
        proposal density of the member that drew it (its γ-tempered posterior, or the prior
        early on): what a training row's ``log_prob`` is used for — recognising prior draws
        and ``discard_samples`` — reads the density of the distribution the row came from.

        Args:
            round: passed to each member's ``sample_proposal``. Others as
                :meth:`sample_posterior`.

        Returns:
            ``{"value": float64 (n, F), "log_prob": float64 (n,)}``.
        """
        equal = np.full(len(self.members), 1.0 / len(self.members))
        extra = {} if round is None else {"round": round}
        value, log_prob, _ = self._draw("sample_proposal", n, conditions, rng, equal, **extra)
        return {"value": value, "log_prob": log_prob}

    def sample_prior(self, n: int, rng: np.random.Generator | None = None) -> Record:
        """``n`` prior draws (the first member's prior; every member has the node's)."""
        return self.members[0].sample_prior(n, rng)

    def log_prob(self, theta: Any, conditions: Mapping[str, Any]) -> np.ndarray:
        """The mixture's log density ``log Σ_k w_k q_k(θ | x)`` (a log-sum-exp).

        Args:
            theta: array ``(N, F)``. conditions: evidence node → ``(N, *D)`` or ``(1, *D)``.

        Returns:
            float64 ``(N,)``; ``-inf`` where every member's density is zero (outside the
            prior's support).

        Raises:
            EstimatorError: a member has no trained model, or mis-shaped input.
        """
        log_q = np.stack(
            [np.asarray(m.log_prob(theta, conditions), dtype=np.float64) for m in self.members]
        )
        with np.errstate(divide="ignore"):
            log_w = np.log(self.weights)
        return _log_mix(log_w, log_q)


def _score(member: Any) -> float | None:
    """``−best_val_loss`` of a member's ``status()`` (``None`` when it has none)."""
    status = getattr(member, "status", None)
    loss = (status() or {}).get("best_val_loss") if callable(status) else None
    return None if loss is None else -float(loss)
