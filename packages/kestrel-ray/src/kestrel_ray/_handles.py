"""Driver-side handles of node actors: submit a sampling call, get block refs back at once.

:class:`NodeHandle` wraps one :class:`~kestrel_ray.NodeWrapper` actor. ``submit`` computes how
many objects the call returns (chunks × fields + one meta dict) and calls the actor with
``.options(num_returns=k)``, so the refs exist immediately, the driver owns every block, and a
downstream node can be called with refs whose values are still being computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kestrel_core import check_count

from ._refs import Column

__all__ = ["NodeHandle", "Pending"]


@dataclass
class Pending:
    """The refs of one node call, before its meta dicts are read.

    Attributes:
        node: node name.
        n: number of samples.
        columns: field (``"value"``, ``"log_prob"``) → :class:`Column` of ``n`` rows.
        meta_refs: one ref per actor call to ``{"fields": {field: (D, dtype)}, "nonfinite": int}``.
    """

    node: str
    n: int
    columns: dict[str, Column] = field(default_factory=dict)
    meta_refs: list[Any] = field(default_factory=list)


class NodeHandle:
    """One node actor as the driver sees it.

    Args:
        name: node name.
        actor: the NodeWrapper actor handle.
        fields: method → fields it returns (from the actor's ``ready()``).
    """

    def __init__(self, name: str, actor: Any, fields: Mapping[str, Sequence[str]]):
        self.name = name
        self.actor = actor
        self.fields = {m: tuple(f) for m, f in fields.items()}

    @property
    def actors(self) -> list[Any]:
        """Every actor behind this handle."""
        return [self.actor]

    def submit(self, method: str, n: int, conditions: Mapping[str, Column], chunks: Sequence[int],
               seeds: Sequence[Any] | None = None) -> Pending:
        """Call ``method`` for ``n`` samples; returns at once with the result refs.

        Args:
            method: ``"sample"``, ``"sample_posterior"`` or ``"sample_proposal"``.
            n: number of samples (0 makes no call).
            conditions: condition node → column of 1 (broadcast) or ``n`` rows.
            chunks: chunk sizes summing to ``n``; one block per chunk and field comes back.
            seeds: one ``SeedSequence`` per chunk, or ``None`` (the actor spawns its own).

        Raises:
            CountError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        fields = self.fields[method]
        if n == 0:
            return Pending(self.name, 0, {f: Column() for f in fields})
        payload = {name: col.payload() for name, col in conditions.items()}
        k = len(chunks) * len(fields) + 1
        refs = getattr(self.actor, method).options(num_returns=k).remote(
            n, payload, list(chunks), None if seeds is None else list(seeds))
        refs = list(refs)
        columns = {f: Column.whole((refs[i * len(fields) + j], c) for i, c in enumerate(chunks))
                   for j, f in enumerate(fields)}
        return Pending(self.name, n, columns, [refs[-1]])
