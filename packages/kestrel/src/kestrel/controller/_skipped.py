"""The simulations a launch skipped because they raised (node option ``on_error: skip``).

The node actors report, per call, how many samples raised and the first exception (the user's
frames and the full traceback); the launcher adds them up per node into
:attr:`RunResult.errors <kestrel.RunResult>` (``errors`` in ``status.json``, next to
``nonfinite``) and logs each node's first exception once: in full in the driver log only, and
its user frames on the console.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kestrel.report._logging import FILE_ONLY

if TYPE_CHECKING:
    from kestrel_ray import RefTrace

__all__ = ["count_errors"]


def count_errors(errors: dict[str, int], trace: RefTrace, what: str, log: logging.Logger) -> None:
    """Add a trace's skipped samples to ``errors`` (node → count, updated in place) and log.

    Args:
        errors: the run's counts so far. trace: a :class:`~kestrel_ray.RefTrace` (its
            ``errors`` and ``error``). what: the round, for the log line. log: the driver log.
    """
    for node, count in trace.errors.items():
        if not count:
            continue
        if not errors.get(node) and node in trace.error:
            short, full = trace.error[node]
            log.warning(
                "node %s: first simulator exception (on_error: skip):\n%s",
                node,
                full.rstrip(),
                extra=FILE_ONLY,
            )
            log.warning(
                "node %s: skipping samples whose simulation raises (on_error: skip); first:\n%s",
                node,
                short.rstrip(),
            )
        errors[node] = errors.get(node, 0) + count
        log.info("%s: node %s raised in %d of %d samples (skipped)", what, node, count, trace.n)
