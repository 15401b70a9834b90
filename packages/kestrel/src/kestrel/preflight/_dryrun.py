"""The dry run: every simulator once, in this process, before a launch starts Ray.

A simulator whose output does not fit its observation (59 values where the observation has 60)
would otherwise be found only after Ray started, actors were deployed and the first epoch
trained, as a shape error of some estimator's condition. :func:`dry_run` simulates the graph
forward on :data:`DRY_RUN_DRAWS` prior draws (seconds) and blames the node itself::

    node 'x' (model.SIR) returns (59,) per sample; its observation has (60,)

A simulator that raises is reported with the file and line of the user's code (one short
traceback; the exception is chained for ``--debug``). A node with ``dry_run: false`` (a
simulator too expensive to call here) and its descendants are not dry-run. With
``on_error: skip`` samples that raise are expected; the others are checked.

Each simulator is also called once more (one sample, two at most) with a generator seeded as
its dry-run call was: one whose output differs ignores its ``rng`` (``--seed`` would not
reproduce a run) and gets a :class:`~kestrel_core._errors.ReproducibilityWarning`. One that
never drew from its ``rng`` gets one more call (two samples on the same parents, another seed):
random samples that are the same under another rng come from a generator it seeds itself
(``default_rng(42)``), so its replicas and rounds would repeat each other's noise — warned too,
before Ray starts; a deterministic simulator is not
(:mod:`kestrel.preflight._reproducible`). What a simulator prints here is not shown (it would
print twice, here and on Ray) unless it raises: then its last lines precede the error.

What the dry run found also fixes the run's key schema: :func:`expected_keys` turns its outputs
(and the observations of nodes it did not run) into the per-sample shape of every key, which
the launch gives its store, so a simulator whose shape changes on Ray is refused at its first
block there (see :mod:`kestrel_core.store._meta`).

Shape symbols: n draws, D a node's per-sample shape.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from collections.abc import Iterator

import numpy as np

from kestrel.preflight._reproducible import ReproducibilityWarning, rng_message, rng_problem
from kestrel.preflight._slownotice import slow_notice
from kestrel_core import (
    Graph,
    GraphError,
    KestrelError,
    Node,
    SimulatorError,
    as_record,
    flat_key,
    seed_sequence,
)
from kestrel_core.internal import (
    Expected,
    attached_traceback,
    build_simulator,
    simulate_or_skip,
    user_traceback,
)

__all__ = ["dry_run", "DRY_RUN_DRAWS", "observation_problem", "expected_keys"]

#: prior draws of a dry run
DRY_RUN_DRAWS = 2


def observation_problem(node: Node, value: np.ndarray) -> str | None:
    """Why the simulated ``value`` ``(n, *D)`` does not fit ``node``'s observation, or ``None``.

    The per-sample shape must equal the observation's (an observation of shape ``(1, *D)`` is
    accepted, as :func:`~kestrel_core.check_observation` does); a complex output needs a complex
    observation and the other way round (other dtypes convert).
    """
    obs = node.observed
    if obs is None:
        return None
    label = f"node {node.name!r} ({node.simulator.target_name})"
    per_sample = tuple(value.shape[1:])
    if obs.shape != per_sample and obs.shape != (1, *per_sample):
        return f"{label} returns {per_sample} per sample; its observation has {obs.shape}"
    if (value.dtype.kind == "c") != (obs.dtype.kind == "c"):
        return f"{label} returns dtype {value.dtype} per sample; its observation has {obs.dtype}"
    return None


def _blame(node: Node, n: int, err: BaseException) -> str:
    text = attached_traceback(err) or user_traceback(err)
    return (
        f"node {node.name!r} ({node.simulator.target_name}): the simulator raised "
        f"{type(err).__name__} in the dry run ({n} prior draws, before Ray starts)\n"
        + text.rstrip()
    )


@contextlib.contextmanager
def _quiet(keep: int = 50) -> Iterator[None]:
    """What the simulator prints during the dry run is not shown (on Ray it goes to the node's
    ``output.log``), unless it raises: then its last ``keep`` lines go to stderr first."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield
    except BaseException:
        lines = buffer.getvalue().splitlines()[-keep:]
        if lines:
            sys.stderr.write("\n".join(lines) + "\n")
        raise


def dry_run(
    graph: Graph,
    n: int = DRY_RUN_DRAWS,
    seed: int = 0,
    *,
    outputs: dict[str, dict[str, np.ndarray]] | None = None,
) -> list[str]:
    """Simulate every node on ``n`` prior draws in this process and check what comes back.

    Each node's simulator is built and called once, in forward order, with its parents'
    dry-run values; a prior's ``log_prob`` is checked too. Outputs are compared with the
    node's observation (:func:`observation_problem`).

    Args:
        graph: the graph (validated here).
        n: draws (≥ 1). seed: the draws' seed (the run's own streams are not touched).
        outputs: filled, when given, with each checked node's fields as a store would keep
            them: ``{node: {"value": (n, *D), "log_prob": (n,)}}`` (``log_prob`` for a
            simulator that has one); the launch sizes its buffer from them.

    Returns:
        Notes on nodes that were not checked (``dry_run: false``, or every draw raised under
        ``on_error: skip``), one line each; empty when every node was checked.

    Raises:
        GraphError: a simulator's output does not fit its observation (naming the node, its
            ``_target_`` and both shapes).
        SimulatorError: a simulator raised (with ``on_error: raise``; the message holds the
            user's frames of the traceback) or returned something unusable.
        ConfigError: a simulator cannot be built.
    """
    graph.validate()
    order = graph.forward_order
    values: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for name, child in zip(order, seed_sequence(seed).spawn(len(order))):
        node = graph.nodes[name]
        missing = [p for p in node.parents if p not in values]
        if not node.dry_run or missing:
            why = "dry_run: false" if not node.dry_run else f"parent {missing[0]!r} not dry-run"
            notes.append(f"node {name!r}: not dry-run ({why})")
            continue
        simulator = build_simulator(node)
        parents = {p: values[p] for p in node.parents}
        rng = np.random.Generator(np.random.PCG64(child))
        try:
            with _quiet(), slow_notice(name, node.simulator.target_name):
                attempt = simulate_or_skip(
                    name, simulator, n, parents, rng=rng, seq=child, on_error=node.on_error
                )
        except KestrelError as err:
            raise type(err)(
                f"{err} (dry run of {node.simulator.target_name} on {n} prior draws, "
                "before Ray starts)"
            ) from err
        except Exception as err:
            raise SimulatorError(_blame(node, n, err)) from err
        if attempt.value is None:
            notes.append(
                f"node {name!r}: raised on all {n} dry-run draws (on_error: skip); not checked"
            )
            continue
        problem = observation_problem(node, attempt.value)
        if problem:
            raise GraphError(problem)
        reference = None if attempt.raised.any() else attempt.value
        with _quiet():
            rng_fault = rng_problem(name, simulator, parents, child, reference)
        if rng_fault is not None:
            message = rng_message(rng_fault, name, node.simulator.target_name)
            warnings.warn(ReproducibilityWarning(message), stacklevel=2)
        fields = {"value": attempt.value}
        log_prob = getattr(simulator, "log_prob", None)
        if callable(log_prob):
            view = attempt.value.view()
            view.flags.writeable = False
            record = {"log_prob": log_prob(view)}
            fields.update(as_record(name, "log_prob", record, n, fields=("log_prob",)))
        values[name] = attempt.value
        if outputs is not None:
            outputs[name] = fields
    return notes


def expected_keys(graph: Graph, outputs: dict[str, dict[str, np.ndarray]]) -> dict[str, Expected]:
    """The per-sample shape (and dtype kind) of each key, fixed before Ray starts.

    Args:
        graph: the run's graph.
        outputs: what :func:`dry_run` filled in (``{node: {field: (n, *D)}}``).

    Returns:
        flat key → :class:`~kestrel_core.store.Expected`: every field the dry run produced
        (an observed node's ``value`` "fixed by its observation", which the dry run matched;
        the others "fixed by the dry run"), and the ``value`` of an observed node the dry run
        did not run, with its observation's shape (any numeric dtype). An observation of shape
        ``(1, …)`` of a node not dry-run says nothing certain (it may be one row of ``D``) and
        is left out: the store's first block fixes that key.
    """
    out: dict[str, Expected] = {}
    for name, node in graph.nodes.items():
        label = f"node {name!r} ({node.simulator.target_name})"
        observed = node.observed
        fields = outputs.get(name)
        if fields is not None:
            for field, arr in fields.items():
                source = (
                    "its observation"
                    if observed is not None and field == "value"
                    else "the dry run before Ray started"
                )
                out[flat_key(name, field)] = Expected(
                    tuple(int(d) for d in arr.shape[1:]), np.dtype(arr.dtype), label, source
                )
        elif observed is not None:
            shape = tuple(int(d) for d in np.shape(observed))
            if shape and shape[0] == 1:
                continue
            out[flat_key(name, "value")] = Expected(shape, None, label, "its observation")
    return out
