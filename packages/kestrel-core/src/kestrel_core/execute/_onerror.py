"""``on_error: skip``: a simulator call in which some samples raise.

A simulator is called on a chunk of ``c`` samples at once. When the call raises and the node's
``on_error`` is ``"skip"``, the chunk is simulated again one sample at a time (each sample with
its own generator, spawned from the chunk's ``SeedSequence``) to find the samples that raise;
the others keep their values. The samples that raised get a filler value (NaN, or 0 for an
integer dtype) and are reported in a mask, so that the caller keeps them out of training as it
does non-finite samples. A :class:`~kestrel_core.ProgramError` (a run of an external program,
:class:`~kestrel_core.Program`, that failed) counts as such an exception although it is a
Kestrel error; when it names the samples that failed (a program run per sample), the chunk is
not simulated again. With ``"raise"`` (the default) the exception propagates, carrying its
short user traceback (:func:`~kestrel_core.execute._blame.attach_user_traceback`).

Every command that simulates follows the option: ``kestrel launch`` keeps such samples out of
training, ``kestrel simulate``, ``kestrel sample`` and ``kestrel check calibration`` drop them
from what they write. :class:`SkipLog` counts them per node over a command's calls and words
the report (the counts, and each node's first exception).

Shape symbols: c samples of the call, D the node's per-sample shape.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kestrel_core._errors import KestrelError, ProgramError, ShapeError, SimulatorError
from kestrel_core.execute._blame import attach_user_traceback, attached_traceback, user_traceback
from kestrel_core.execute._boundary import call_simulator, finite_rows

__all__ = [
    "Attempt",
    "simulate_or_skip",
    "fill_raised",
    "skipped_values",
    "format_full",
    "SkipLog",
    "raised_rows",
    "nonfinite_counts",
    "nonfinite_line",
    "print_report",
]


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
        KestrelError: always raised (an unusable output is a bug, not an invalid sample),
            except a :class:`~kestrel_core.ProgramError`, which follows ``on_error``.
        ShapeError: the samples that did not raise disagree on the per-sample shape.
    """
    try:
        return Attempt(call_simulator(node, simulator, n, parents, rng=rng), np.zeros(n, bool))
    except ProgramError as err:  # a failed run of an external program: a failed sample
        attach_user_traceback(err)
        if on_error != "skip":
            raise
        known = _known_failures(err, n)
        if known is not None:
            return known
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
        except ProgramError as err:
            raised[k] = True
            rows.append(None)
            if first is None:
                first = attach_user_traceback(err)
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


def _known_failures(err: ProgramError, n: int) -> Attempt | None:
    """The attempt a :class:`ProgramError` describes when it names its failed samples (a
    per-sample program ran every sample); ``None``: simulate again one sample at a time."""
    failed = None if err.failed is None else np.asarray(err.failed, dtype=bool)
    if failed is None or failed.shape != (n,):
        return None
    value = err.value
    if value is None:
        return Attempt(None, failed.copy(), err) if failed.all() else None
    value = np.array(value, order="C", copy=True)
    if value.ndim == 0 or value.shape[0] != n:
        return None
    return Attempt(fill_raised(value, failed), failed.copy(), err)


def fill_raised(value: np.ndarray, raised: np.ndarray) -> np.ndarray:
    """``value`` with the filler (NaN, or 0 for integer/bool dtypes) in the rows that raised."""
    if raised.any():
        value[raised] = np.nan if value.dtype.kind in "fc" else 0
    return value


def format_full(err: BaseException) -> str:
    """The whole traceback of ``err``, as Python prints it."""
    return "".join(traceback.format_exception(err))


def skipped_values(
    node: str, attempts: Sequence[Attempt], template: tuple[tuple[int, ...], Any] | None = None
) -> tuple[list[np.ndarray], tuple[str, str] | None]:
    """The value of each chunk of a call, a chunk whose every sample raised filled in.

    Args:
        node: node name (messages). attempts: one per chunk, in order.
        template: ``(D, dtype)`` of an earlier call, for when no chunk of this one succeeded.

    Returns:
        ``(values, error)``: ``(c, *D)`` per chunk (filler — NaN, or 0 — in rows that raised),
        and the first exception of the call as ``(user frames, full traceback)`` texts
        (``None`` without one).

    Raises:
        SimulatorError: every sample of the call raised and no earlier call gave ``D`` (the
            message holds the first exception with the user's frames; it is chained).
    """
    first = next((t.first for t in attempts if t.first is not None and t.raised.any()), None)
    error = None
    if first is not None:  # (the user's frames, the full traceback)
        error = (attached_traceback(first) or user_traceback(first), format_full(first))
    done = next((t.value for t in attempts if t.value is not None), None)
    if done is not None:
        template = (done.shape[1:], done.dtype)
    if template is None:
        n = sum(len(t.raised) for t in attempts)
        assert first is not None and error is not None
        raise SimulatorError(
            f"node {node!r}: the simulator raised on all {n} samples of the call "
            f"(on_error: skip)\n{error[0].rstrip()}"
        ) from first
    values = [
        t.value
        if t.value is not None
        else fill_raised(np.empty((len(t.raised), *template[0]), template[1]), t.raised)
        for t in attempts
    ]
    return values, error


def raised_rows(raised: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """bool ``(n,)``: the samples whose simulation raised in any node (node → bool ``(n,)``)."""
    out = np.zeros(n, dtype=bool)
    for mask in raised.values():
        out |= np.asarray(mask, dtype=bool)
    return out


def nonfinite_counts(arrays: Mapping[str, np.ndarray], lead: int = 1) -> dict[str, int]:
    """node → number of its samples holding a NaN or ±inf (arrays ``(*L, *D)``, ``lead`` = len L).

    The per-sample test is the boundary's (:func:`~kestrel_core.execute._boundary.finite_rows`: only
    float and complex values can be non-finite); nodes without such a sample are left out.
    """
    out: dict[str, int] = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.ndim < lead:
            continue
        rows = a.reshape(int(np.prod(a.shape[:lead], dtype=np.int64)), *a.shape[lead:])
        count = int((~finite_rows({name: rows})).sum()) if rows.ndim else 0
        if count:
            out[name] = count
    return out


@dataclass
class SkipLog:
    """The samples a command skipped because their simulation raised (``on_error: skip``).

    Attributes:
        errors: node → samples whose simulation raised (and were dropped).
        error: node → its first exception as ``(user frames, full traceback)`` texts.
    """

    errors: dict[str, int] = field(default_factory=dict)
    error: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add(self, trace: Any) -> np.ndarray | None:
        """Count a trace's raised samples (its ``errors``, ``error`` and ``raised``).

        Returns:
            bool ``(N,)``: the samples to keep (none raised); ``None`` when none raised.
        """
        errors = {m: int(c) for m, c in getattr(trace, "errors", {}).items() if c}
        for node, count in errors.items():
            self.errors[node] = self.errors.get(node, 0) + count
            first = getattr(trace, "error", {}).get(node)
            if first and node not in self.error:
                self.error[node] = (str(first[0]), str(first[1]))
        if not errors:
            return None
        return ~raised_rows(getattr(trace, "raised", {}), trace.n)

    def warnings(self, prog: str) -> list[str]:
        """Each node's first exception, the user's frames (as ``kestrel launch`` logs them)."""
        return [
            f"{prog}: node {node}: skipping samples whose simulation raises (on_error: skip); "
            f"first:\n{self.error[node][0].rstrip()}"
            for node in self.errors
            if node in self.error
        ]

    def line(self, n: int | None = None) -> str | None:
        """``"dropped 85 of 1000 samples whose simulation raised (on_error: skip): {'x': 85}"``
        (per node; ``None`` when none raised)."""
        if not self.errors:
            return None
        of = f" of {n}" if n is not None else ""
        return (
            f"dropped {sum(self.errors.values())}{of} samples whose simulation raised "
            f"(on_error: skip): {self.errors}"
        )


def nonfinite_line(counts: Mapping[str, int], n: int) -> str | None:
    """``"note: samples holding NaN or ±inf per node (kept, of 1000): {'x': 3}"``, or ``None``."""
    if not counts:
        return None
    return f"note: samples holding NaN or ±inf per node (kept, of {n}): {dict(counts)}"


def print_report(
    prog: str, skipped: SkipLog, n: int, arrays: Mapping[str, np.ndarray], lead: int = 1
) -> None:
    """Print what a command skipped (stdout: the counts per node; stderr: each node's first
    exception) and the samples it wrote that hold NaN or ±inf (a one-line note, per node).

    Args:
        prog: ``"kestrel sample"``, … skipped: the command's log. n: samples asked for.
        arrays: what the command wrote, node → ``(*L, *D)``. lead: len L (2 for a batch).
    """
    import sys

    kept = n - sum(skipped.errors.values()) if lead == 1 else n
    for line in (skipped.line(n), nonfinite_line(nonfinite_counts(arrays, lead), kept)):
        if line:
            print(f"  {line}", flush=True)
    for text in skipped.warnings(prog):
        print(text, file=sys.stderr)
