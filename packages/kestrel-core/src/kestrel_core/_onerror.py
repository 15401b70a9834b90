"""``on_error: skip``: a simulator call in which some samples raise.

A simulator is called on a chunk of ``c`` samples at once. When the call raises and the node's
``on_error`` is ``"skip"``, the chunk is simulated again one sample at a time (each sample with
its own generator, spawned from the chunk's ``SeedSequence``) to find the samples that raise;
the others keep their values. The samples that raised get a filler value (NaN, or 0 for an
integer dtype) and are reported in a mask, so that the caller keeps them out of training as it
does non-finite samples. With ``"raise"`` (the default) the exception propagates, carrying its
short user traceback (:func:`~kestrel_core._blame.attach_user_traceback`).

Shape symbols: c samples of the call, D the node's per-sample shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._blame import attach_user_traceback
from ._boundary import call_simulator
from ._errors import KestrelError, ShapeError

__all__ = ["Attempt", "simulate_or_skip", "fill_raised"]


@dataclass
class Attempt:
    """The outcome of one simulator call under ``on_error``.

    Attributes:
        value: ``(c, *D)``, filler in the rows that raised; ``None`` when every row raised.
        raised: bool ``(c,)``: the samples whose simulation raised.
        first: the first exception (its user traceback attached), or ``None``.
    """

    value: np.ndarray | None
    raised: np.ndarray
    first: BaseException | None = None


def simulate_or_skip(
    node: str,
    simulator: Any,
    n: int,
    parents: Mapping[str, np.ndarray],
    *,
    rng: np.random.Generator,
    seq: np.random.SeedSequence,
    on_error: str = "raise",
) -> Attempt:
    """Call the simulator on ``n`` samples; with ``on_error="skip"`` find the rows that raise.

    Args:
        node: node name (messages). simulator: the node's simulator.
        n: samples (≥ 1). parents: name → ``(n, *D_p)`` or ``(1, *D_p)`` (broadcast).
        rng: the generator of the call. seq: the call's sequence; the per-sample generators
            of a retry are spawned from it.
        on_error: ``"raise"`` or ``"skip"``.

    Returns:
        An :class:`Attempt`.

    Raises:
        Exception: with ``"raise"``, the simulator's own exception (user traceback attached).
        KestrelError: always raised (an unusable output is a bug, not an invalid sample).
        ShapeError: the samples that did not raise disagree on the per-sample shape.
    """
    try:
        return Attempt(call_simulator(node, simulator, n, parents, rng=rng), np.zeros(n, bool))
    except KestrelError:
        raise
    except Exception as err:
        attach_user_traceback(err)
        if on_error != "skip":
            raise
    first: BaseException | None = None  # of the samples, one at a time
    raised = np.zeros(n, dtype=bool)
    rows: list[np.ndarray | None] = []
    for k, child in enumerate(seq.spawn(n)):
        row = {p: v if v.shape[0] == 1 else v[k : k + 1] for p, v in parents.items()}
        try:
            gen = np.random.Generator(np.random.PCG64(child))
            rows.append(call_simulator(node, simulator, 1, row, rng=gen))
        except KestrelError:
            raise
        except Exception as err:
            raised[k] = True
            rows.append(None)
            if first is None:
                first = attach_user_traceback(err)
    good = [r for r in rows if r is not None]
    if not good:
        return Attempt(None, raised, first)
    shape = good[0].shape[1:]
    bad = next((r.shape[1:] for r in good if r.shape[1:] != shape), None)
    if bad is not None:
        raise ShapeError(
            f"node {node!r}: samples simulated one at a time have per-sample shapes {shape} "
            f"and {bad}"
        )
    value = np.empty((n, *shape), dtype=np.result_type(*good))
    for k, r in enumerate(rows):
        if r is not None:
            value[k] = r[0]
    return Attempt(fill_raised(value, raised), raised, first)


def fill_raised(value: np.ndarray, raised: np.ndarray) -> np.ndarray:
    """``value`` with the filler (NaN, or 0 for integer/bool dtypes) in the rows that raised."""
    if raised.any():
        value[raised] = np.nan if value.dtype.kind in "fc" else 0
    return value
