"""A dry-run call that takes long is said, so a simulator that hangs before Ray starts is seen.

The dry run calls every simulator in this process (:mod:`kestrel.preflight._dryrun`); what the
simulator prints there is held back. :func:`slow_notice` writes one line to the terminal's
stderr when a call has run :data:`DRY_RUN_NOTE` seconds, and again each time that time
doubles: which node, for how long, and what to do (``dry_run: false`` for a simulator too
expensive to call here; Ctrl-C stops, nothing has been simulated or written yet).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from kestrel.report._env import env_seconds

__all__ = ["slow_notice", "DRY_RUN_NOTE"]


#: seconds after which a dry-run call is reported (``KESTREL_DRY_RUN_NOTE``)
DRY_RUN_NOTE = env_seconds("KESTREL_DRY_RUN_NOTE", 10.0, least=0.1)


@contextlib.contextmanager
def slow_notice(node: str, target: str, after: float | None = None) -> Iterator[None]:
    """Report on stderr (the real one: the dry run captures ``sys.stderr``) while the body
    runs longer than ``after`` seconds (default :data:`DRY_RUN_NOTE`)."""
    first = DRY_RUN_NOTE if after is None else float(after)
    done = threading.Event()
    start = time.monotonic()

    def watch() -> None:
        wait = first
        while not done.wait(max(0.0, start + wait - time.monotonic())):
            stream = sys.__stderr__
            if stream is not None:
                stream.write(
                    f"dry run: node {node!r} ({target}) has run for "
                    f"{time.monotonic() - start:.0f} s on its dry-run draws; a simulator too "
                    f"slow to call before Ray starts can skip it with `dry_run: false` on the "
                    f"node (Ctrl-C stops: nothing is written yet)\n"
                )
                stream.flush()
            wait *= 2

    thread = threading.Thread(target=watch, name="kestrel-dry-run-notice", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
