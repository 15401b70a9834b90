"""What a launch returns (:class:`RunResult`) and raises when a node fails (:class:`RunError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kestrel_core import KestrelError

__all__ = ["RunResult", "RunError"]


@dataclass
class RunResult:
    """The outcome of :func:`launch`.

    Attributes:
        run_dir: the run directory. status: ``"completed"``, ``"interrupted"`` (Ctrl-C or
            timeout; weights saved) or ``"failed"``. reason: why it stopped early, if it did.
        seed: the run's seed (the entropy used when none was given). resumed: nodes whose
            saved weights were loaded. epochs: node → epochs trained over the estimator's life.
        samples: mode → file written. simulated: samples appended. nonfinite: node → non-finite
            simulations dropped. wall_time: seconds. placement: node → the Ray node id of each
            of its actors. config: the run's config.
    """

    run_dir: str
    status: str
    seed: int
    reason: str | None = None
    resumed: list[str] = field(default_factory=list)
    epochs: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    simulated: int = 0
    nonfinite: dict[str, int] = field(default_factory=dict)
    wall_time: float = 0.0
    placement: dict[str, list[str]] = field(default_factory=dict)
    config: Any = field(default=None, repr=False)


class RunError(KestrelError):
    """A launch failed: a node's actor raised (message: the node, the error and its remote
    traceback). ``result`` is the :class:`RunResult` (status ``"failed"``); ``node`` the node."""

    def __init__(self, message: str, *, node: str | None = None, result: RunResult | None = None):
        super().__init__(message)
        self.node = node
        self.result = result
