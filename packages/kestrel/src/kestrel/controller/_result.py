"""What a launch returns: :class:`RunResult` (a failed launch raises :class:`~kestrel_ray.RunError`,
which carries it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kestrel.controller._states import RunStatus

if TYPE_CHECKING:
    from kestrel.run._run import Run
    from kestrel_core import RunConfig

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """The outcome of :func:`~kestrel.launch`.

    Attributes:
        run_dir: the run directory.
        status: a :class:`RunStatus` (a string): ``"completed"``, ``"interrupted"`` (Ctrl-C or
            timeout; weights saved) or ``"failed"``.
        seed: the run's seed (the entropy used when none was given).
        reason: why it stopped early, if it did.
        resumed: nodes whose saved weights were loaded.
        epochs: node → epochs trained over the estimator's life.
        samples: mode → file written.
        simulated: samples appended.
        nonfinite: node → non-finite simulations dropped.
        errors: node → simulations that raised and were skipped (``on_error: skip``).
        restarts: node → how often Ray restarted its actors after a crash (the call running
            on one was retried with the same seeds; see :mod:`._restarts`).
        wall_time: seconds.
        placement: node → the Ray node id of each of its actors.
        config: the run's config.
        stop_signal: the signal that stopped the launch gracefully (``signal.SIGINT`` or
            ``signal.SIGTERM``), else ``None``.
    """

    run_dir: str
    status: RunStatus
    seed: int
    reason: str | None = None
    resumed: list[str] = field(default_factory=list)
    epochs: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    simulated: int = 0
    nonfinite: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    wall_time: float = 0.0
    placement: dict[str, list[str]] = field(default_factory=dict)
    config: RunConfig | None = field(default=None, repr=False)
    stop_signal: int | None = None

    def open(self, *, trust: bool = False) -> Run:
        """The run as a Python object: :func:`kestrel.open_run` of :attr:`run_dir` (its
        posterior, prior, metrics, plots; nothing drawn yet).

        Args:
            trust: as :func:`~kestrel.open_run` (``--trust``).

        Raises:
            As :func:`~kestrel.open_run`.
        """
        from kestrel.run._run import open_run

        return open_run(self.run_dir, trust=trust)
