"""An estimator node with ``ensemble: K`` > 1: K members trained at once, one actor each.

The node's actor (a :class:`~kestrel_ray.NodeWrapper`) is member 0; it starts members
1…K−1 as actors of their own — the same node, the same resource request (the node's ``ray``
mapping), spread over the cluster's machines where it has several (``SPREAD``) — which die
with it. Every member trains from the same store with its own seed
(:func:`member_seed`: derived from the estimator's ``seed``, else from the node's actor seed,
and the member's index, so a deterministic launch stays deterministic).

What the driver asks of the node's actor it asks of every member: the round schedule, training
(all K at once), stopping, the estimator's bytes (K checkpoints, packed into one
``estimator.pt`` by the estimator's ``pack_members``; loading unpacks them). Draws:

* ``sample_posterior`` draws from the mixture weighted by the members' validation
  log-probabilities: a local estimator loaded from the packed members' bytes (its
  ``load_bytes`` makes it the mixture, kestrel-torch's ``EnsemblePosterior``), rebuilt at each
  call while training runs and once after — the same object ``kestrel sample`` and
  ``kestrel.open_run`` load, so a seed gives the same draws on Ray and off it;
* ``sample_proposal`` (a resimulation round) draws each row from one member, chosen with equal
  probability from the call's seed, by that member's own proposal for the round (the model it
  fixed for it), so a deterministic launch's proposals do not depend on timing; a row's
  ``log_prob`` is its member's proposal density.

The estimator must provide ``pack_members`` and ``unpack_members`` (kestrel-torch's
estimators do); this module never imports torch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import ray

from kestrel_core import Estimator, EstimatorError, Spec, as_record, seed_sequence
from kestrel_core.internal import call_estimator

__all__ = ["ensemble_size", "member_seed", "member_estimator", "Members", "MEMBER_VALIDATION"]


def ensemble_size(spec: Spec) -> int:
    """K of an estimator spec's ``ensemble`` keyword (1 without one; checked by the
    estimator's options when it is built)."""
    value = spec.kwargs.get("ensemble", 1) if not spec.is_live else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1


def member_seed(base: int, member: int) -> int:
    """Member ``member``'s estimator seed: a 32-bit integer of ``SeedSequence([base, member])``
    (a function of the two alone)."""
    return int(np.random.SeedSequence([int(base), int(member)]).generate_state(1)[0])


#: the share of rows each member validates on when the config sets no ``validation_fraction``
MEMBER_VALIDATION = 0.1


def member_estimator(spec: Spec, context_seed: int, member: int) -> tuple[Spec, Any]:
    """The spec of member ``member`` and its estimator, built (not set up).

    The spec is ``spec`` with ``seed`` set to :func:`member_seed` of the estimator's ``seed``
    (else ``context_seed``, the node actor's), and — where the estimator has the option and
    the config does not set it — ``validation_fraction`` :data:`MEMBER_VALIDATION`: the
    validation slice follows the seed, so each member validates on its own rows.

    Raises:
        Exception: the estimator's constructor's (a bad option).
    """
    base = spec.kwargs.get("seed")
    base = context_seed if base is None else int(base)
    kwargs = {**spec.kwargs, "seed": member_seed(base, member)}
    out = Spec(spec.target, kwargs, spec.imports)
    estimator = out.build()
    if "validation_fraction" not in kwargs and "validation_fraction" in dict(
        getattr(estimator, "config", None) or {}
    ):
        out = Spec(spec.target, {**kwargs, "validation_fraction": MEMBER_VALIDATION}, spec.imports)
        estimator = out.build()
    return out, estimator


def _rows(conditions: Mapping[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v if v.shape[:1] == (1,) else v[index] for k, v in conditions.items()}


class Members:
    """The actors of members 1…K−1 of an ensemble node, seen from member 0's actor.

    Args:
        name: the node's name (in messages). actors: the member actors, member ``k`` at
            index ``k − 1`` (each a ``NodeWrapper`` started with ``member=k``).
    """

    def __init__(self, name: str, actors: Sequence[Any]):
        self.name = name
        self.actors = list(actors)

    def __len__(self) -> int:
        return len(self.actors)

    async def gather(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every member actor at once; their answers in member order.

        Raises:
            KestrelError: a member failed (its own error, with a note naming the member).
        """
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        out = []
        for k, ref in enumerate(refs, 1):
            try:
                out.append(await ref)
            except ray.exceptions.RayTaskError as err:
                cause = err.as_instanceof_cause()
                if hasattr(cause, "add_note"):
                    cause.add_note(f"(ensemble member {k} of node {self.name!r}, {method})")
                raise cause from None
        return out

    def tell(self, method: str, *args: Any) -> None:
        """``method(*args)`` on every member actor; fire and forget."""
        for actor in self.actors:
            getattr(actor, method).remote(*args)

    async def propose(
        self,
        local: Estimator,
        round: int | None,
        n: int,
        conditions: Mapping[str, np.ndarray],
        seq: int | np.random.SeedSequence,
    ) -> dict[str, np.ndarray]:
        """``n`` proposal draws, each row from one member (equal probabilities, from ``seq``).

        Args:
            local: member 0's estimator (drawn here). round: member 0's round (the others
                draw from their own). conditions: name → ``(n, *D)`` or ``(1, *D)``.
            seq: the chunk's ``SeedSequence`` (or int).

        Returns:
            ``{"value": (n, F), "log_prob": (n,)}``, a row's ``log_prob`` its member's density.
        """
        seq = seed_sequence(seq)
        k_all = len(self.actors) + 1
        which = np.random.Generator(np.random.PCG64(seq)).integers(k_all, size=n)
        children = seq.spawn(k_all)
        index = [np.flatnonzero(which == k) for k in range(k_all)]
        refs = {
            k: self.actors[k - 1].member_draw.remote(
                "sample_proposal", int(index[k].size), _rows(conditions, index[k]), children[k]
            )
            for k in range(1, k_all)
            if index[k].size
        }
        parts: dict[int, Mapping[str, np.ndarray]] = {}
        if index[0].size:
            out = call_estimator(
                local, "sample_proposal", int(index[0].size), _rows(conditions, index[0]),
                children[0], round,
            )  # fmt: skip
            parts[0] = as_record(self.name, "sample_proposal", out, int(index[0].size))
        for k, ref in refs.items():
            parts[k] = await ref
        first = next(iter(parts.values()))
        value = np.empty((n, *first["value"].shape[1:]), dtype=first["value"].dtype)
        log_prob = np.empty(n, dtype=np.float64)
        for k, part in parts.items():
            value[index[k]] = part["value"]
            log_prob[index[k]] = part["log_prob"]
        return {"value": value, "log_prob": log_prob}


def check_members(name: str, estimator: Estimator) -> None:
    """Raise unless ``estimator`` can be ensembled (packs and unpacks members' bytes).

    Raises:
        EstimatorError: it lacks ``pack_members`` / ``unpack_members``.
    """
    if not all(callable(getattr(estimator, m, None)) for m in ("pack_members", "unpack_members")):
        raise EstimatorError(
            f"node {name!r}: estimator {type(estimator).__name__} has no pack_members/"
            "unpack_members, so it cannot be trained as an ensemble; drop 'ensemble' or use "
            "one of kestrel_torch's estimators"
        )


async def wait_all(refs: Sequence[Any]) -> list[Any]:
    """Await Ray refs (or coroutines) together; their results in order."""
    return list(await asyncio.gather(*refs))
