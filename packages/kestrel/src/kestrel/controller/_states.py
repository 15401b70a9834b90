"""The states of a launch: the :class:`Phase` it reports, the :class:`RunStatus` it ends with, and
the state objects its controller moves through.

:class:`Phase` and :class:`RunStatus` (:mod:`._phases`) are string enums: a member equals its text
(``RunStatus.COMPLETED == "completed"``) and prints as it (log lines, the progress display,
``status.json``, ``profile.json``), so the on-disk format and comparisons with plain strings
stay as they were.

The :class:`~kestrel.controller._launcher.Launcher` is a controller over the state objects below
(small frozen dataclasses, each holding what the launch knows in that state and reporting one
:class:`Phase`): one :meth:`~kestrel.controller._launcher.Launcher._step` does the work of the
current state and returns a :class:`Step` (the state it began in, the state it leads to); the
run loop advances ``state = step().next`` until a terminal state:

=====================  ==================================================================
state                  leads to
=====================  ==================================================================
``Starting``           ``Restoring`` (the saved weights loaded)
``Restoring``          ``InitialSimulation(left)``
``InitialSimulation``  itself while pieces are left; ``Training`` once every row is in the
                       store; ``Saving`` after a stop request (the pieces done appended;
                       ``Stopping`` first while rounds from the prior are in flight)
``Training``           itself; ``Stopping`` when a stop is requested; ``Saving`` once training
                       ended and no round is owed (the rounds in flight drained)
``Stopping``           itself; ``Saving`` once the training calls ended (rounds drained)
``Saving``             ``Sampling`` (``auto_sample``), else ``Finished``
``Sampling``           ``Finished``
=====================  ==================================================================

An exception ends the loop in any state: :class:`Failed` (a node or a check failed) or
:class:`Aborted` (a second Ctrl-C).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kestrel.controller._phases import Phase, RunStatus

if TYPE_CHECKING:
    from kestrel.controller._prior import PriorSimulation
    from kestrel.controller._rounds import Resimulation

__all__ = [
    "Phase",
    "RunStatus",
    "LaunchState",
    "Starting",
    "Restoring",
    "InitialSimulation",
    "Training",
    "Stopping",
    "Saving",
    "Sampling",
    "Ended",
    "Finished",
    "Failed",
    "Aborted",
    "Step",
]


class LaunchState:
    """A state of the launch loop.

    Attributes:
        phase: the :class:`Phase` the launch reports in this state (the progress display,
            ``profile.json``); a terminal state keeps the phase the launch ended in.
        terminal: no step leads on from this state.
    """

    phase: Phase
    terminal: ClassVar[bool] = False

    def rounds_drawn(self) -> int:
        """Resimulation rounds drawn so far (``rounds`` in ``status.json``)."""
        return 0


@dataclass(frozen=True)
class Starting(LaunchState):
    """The actors are being deployed; next, the saved weights are loaded (a resume)."""

    phase: Phase = field(default=Phase.STARTING, init=False)


@dataclass(frozen=True)
class Restoring(LaunchState):
    """The run's saved buffer and the journal beyond it are put back (a resume), then the rows
    of ``buffer.initial_samples_path`` appended (without a saved buffer); reported as the
    initial simulation, which fills the rest of the buffer."""

    phase: Phase = field(default=Phase.INITIAL_SIMULATION, init=False)


@dataclass(frozen=True)
class InitialSimulation(LaunchState):
    """Simulating from the prior, in pieces appended as they are done (one poll per step).

    Attributes:
        prior: the launch's :class:`~kestrel.controller._prior.PriorSimulation` (its ``left``:
            rows not yet in the store).
        rounds: the launch's resimulation rounds
            (:class:`~kestrel.controller._rounds.Resimulation`): without determinism, rounds
            from the prior are drawn once every piece is submitted (its ``prime``), so the
            replicas simulate on while training starts.
    """

    prior: PriorSimulation
    rounds: Resimulation
    phase: Phase = field(default=Phase.INITIAL_SIMULATION, init=False)


@dataclass(frozen=True)
class Training(LaunchState):
    """The estimators train while resimulation rounds are drawn; one poll per step.

    Attributes:
        calls: the training calls still running (ObjectRef → node).
        rounds: the launch's resimulation rounds (:class:`~kestrel.controller._rounds.Resimulation`).
    """

    calls: Mapping[Any, str]
    rounds: Resimulation
    phase: Phase = field(default=Phase.TRAINING, init=False)

    def rounds_drawn(self) -> int:
        return int(self.rounds.drawn)


@dataclass(frozen=True)
class Stopping(Training):
    """A stop was requested (Ctrl-C, SIGTERM, timeout): the estimators were asked to stop after
    their current step, no new round is drawn; the launch waits for the training calls."""

    phase: Phase = field(default=Phase.STOPPING, init=False)


@dataclass(frozen=True)
class Saving(LaunchState):
    """The buffer snapshot and the estimators' weights are written.

    Attributes:
        status: how the launch ends (``completed``, ``timeout`` or ``interrupted``).
        drawn: resimulation rounds drawn.
    """

    status: RunStatus
    drawn: int = 0
    phase: Phase = field(default=Phase.SAVING, init=False)

    def rounds_drawn(self) -> int:
        return self.drawn


@dataclass(frozen=True)
class Sampling(LaunchState):
    """The configured posterior (and PPD) samples are drawn (``auto_sample``).

    Attributes:
        status: how the launch ends. drawn: resimulation rounds drawn.
    """

    status: RunStatus
    drawn: int = 0
    phase: Phase = field(default=Phase.SAMPLING, init=False)

    def rounds_drawn(self) -> int:
        return self.drawn


@dataclass(frozen=True)
class Ended(LaunchState):
    """A terminal state.

    Attributes:
        status: how the launch ended. phase: the phase it ended in.
        drawn: resimulation rounds drawn. reason: why it stopped early or failed (``None``:
            it did not).
    """

    status: RunStatus
    phase: Phase
    drawn: int = 0
    reason: str | None = None
    terminal: ClassVar[bool] = True

    def rounds_drawn(self) -> int:
        return self.drawn


@dataclass(frozen=True)
class Finished(Ended):
    """The launch saved (and sampled): ``completed``, ``timeout`` or ``interrupted``."""


@dataclass(frozen=True)
class Failed(Ended):
    """A node or a check failed (status ``failed``); what was left was saved on the way."""


@dataclass(frozen=True)
class Aborted(Ended):
    """A second Ctrl-C (status ``aborted``); nothing more was saved."""


@dataclass(frozen=True)
class Step:
    """One turn of the launch loop.

    Attributes:
        previous: the state the step began in. next: the state it leads to.
    """

    previous: LaunchState
    next: LaunchState
