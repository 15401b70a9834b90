"""Progress of a launch: a live table on a terminal, plain log lines elsewhere.

A progress reporter receives a :class:`ProgressState` (what the launch knows at one poll) from
the launch loop's poll callback (:class:`~kestrel.controller._watch.LaunchWatch`):

* :class:`LiveProgress` (stdout is a terminal): a ``rich`` live table with one row per
  estimator node (state, epoch / max, train and validation loss, samples seen) and a footer
  with the buffer counts, simulations per second and the elapsed time;
* :class:`LogProgress` (otherwise, e.g. in CI): one plain line per node every ``every``
  seconds, through the driver's logger (so it lands in ``graph/driver/output.log`` too).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kestrel.controller._states import Phase

__all__ = [
    "ProgressState",
    "Progress",
    "LiveProgress",
    "LogProgress",
    "NullProgress",
    "make_progress",
    "simulation_text",
    "budget_spent",
]


@dataclass
class ProgressState:
    """What the launch loop knows at one poll.

    Attributes:
        elapsed: seconds since the launch started.
        phase: the launch's :class:`Phase` (a string: ``"initial simulation"``, ``"training"``,
            ``"stopping"``, ``"sampling"``, …).
        nodes: estimator node → its estimator's status dict (``epoch``, ``max_epochs``,
            ``train_loss``, ``val_loss``, ``samples_seen``, ``state``).
        buffer: the store's counts (``training``, ``validation``, …).
        simulated: valid samples that entered the buffer in this launch. rate: of those per
            second, averaged over the launch since its first simulation began.
        nonfinite: node → non-finite simulations dropped so far.
        budget: ``{"total", "used", "invalid", "left"}`` of the simulation budget (empty: none).
    """

    elapsed: float
    phase: Phase
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    buffer: dict[str, int] = field(default_factory=dict)
    simulated: int = 0
    rate: float = 0.0
    nonfinite: dict[str, int] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)


class Progress(Protocol):
    """A progress reporter: ``launch`` calls ``start``, then ``update`` at every poll, then ``stop``."""

    def start(self) -> None: ...

    def update(self, state: ProgressState) -> None: ...

    def stop(self) -> None: ...


def budget_spent(budget: Mapping[str, Any]) -> bool:
    """Whether a :attr:`ProgressState.budget` is set and has nothing left."""
    return bool(budget) and budget.get("total") is not None and budget.get("left") == 0


def simulation_text(state: ProgressState, rate: str = "{:.0f}/s") -> str:
    """The simulations of a progress line: ``"812 simulated (64/s) · budget 812/10000"``;
    once the budget is spent, ``"10000 simulated, budget spent (10000/10000)"`` (no rate: the
    launch's average would only decay while it trains on).

    Args:
        state: the poll's state.
        rate: the format of the rate (simulations per second).
    """
    budget = state.budget
    if budget_spent(budget):
        return (
            f"{state.simulated} simulated, budget spent "
            f"({budget.get('used', 0)}/{budget.get('total')})"
        )
    text = f"{state.simulated} simulated ({rate.format(state.rate)})"
    if budget:
        text += f" · budget {budget.get('used', 0)}/{budget.get('total')}"
    return text


def _loss(value: Any) -> str:
    return "—" if value is None else f"{value:.4g}"


def _epochs(status: Mapping[str, Any]) -> str:
    epoch, most = status.get("epoch", 0), status.get("max_epochs", "?")
    if isinstance(epoch, int) and isinstance(most, int) and epoch > most:
        # training goes on past max_epochs while a budget's rounds still come
        return f"{epoch} (max_epochs {most}, on for the budget)"
    return f"{epoch}/{most}"


def _buffer(buf: Mapping[str, int]) -> str:
    if not buf:
        return "buffer: —"
    return (
        f"buffer: {buf.get('training', 0)} train, {buf.get('validation', 0)} validation, "
        f"{buf.get('disfavoured', 0)} disfavoured"
    )


class NullProgress:
    """Reports nothing."""

    def start(self) -> None:
        pass

    def update(self, state: ProgressState) -> None:
        pass

    def stop(self) -> None:
        pass


class LogProgress:
    """Plain progress lines through ``logger`` at most every ``every`` seconds.

    Args:
        logger: where the lines go (the launch's driver logger).
        every: seconds between reports (a phase change reports at once).
    """

    def __init__(self, logger: logging.Logger, every: float = 10.0):
        self._log = logger
        self._every = float(every)
        self._last = -float("inf")
        self._phase: Phase | None = None

    def start(self) -> None:
        pass

    def update(self, state: ProgressState) -> None:
        now = time.monotonic()
        if state.phase == self._phase and now - self._last < self._every:
            return
        self._last, self._phase = now, state.phase
        self._log.info(
            "[%6.1f s] %s; %s; %s",
            state.elapsed,
            state.phase,
            _buffer(state.buffer),
            simulation_text(state),
        )
        for node, st in state.nodes.items():
            self._log.info(
                "  node %s: %s epoch %s, train loss %s, val loss %s, %s samples seen",
                node,
                st.get("state", "?"),
                _epochs(st),
                _loss(st.get("train_loss")),
                _loss(st.get("val_loss")),
                st.get("samples_seen", 0),
            )

    def stop(self) -> None:
        pass


class LiveProgress:
    """A ``rich`` live table, redrawn at every update (a few times per second at most)."""

    def __init__(self, title: str = "kestrel launch"):
        from rich.console import Console
        from rich.live import Live

        self._title = title
        self._console = Console()
        self._live = Live(
            console=self._console,
            refresh_per_second=4,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
        )

    def start(self) -> None:
        self._live.start()

    def update(self, state: ProgressState) -> None:
        from rich.table import Table

        table = Table(
            title=f"{self._title} — {state.phase} — {state.elapsed:.0f} s", title_justify="left"
        )
        for col in ("node", "state", "epoch", "train loss", "val loss", "samples seen"):
            table.add_column(col, justify="left" if col in ("node", "state") else "right")
        for node, st in state.nodes.items():
            table.add_row(
                node,
                str(st.get("state", "?")),
                _epochs(st),
                _loss(st.get("train_loss")),
                _loss(st.get("val_loss")),
                str(st.get("samples_seen", 0)),
            )
        bad = {k: v for k, v in state.nonfinite.items() if v}
        caption = f"{_buffer(state.buffer)} · {simulation_text(state, '{:.0f} sim/s')}"
        if bad:
            caption += f" · non-finite dropped: {bad}"
        table.caption = caption
        table.caption_justify = "left"
        self._live.update(table)

    def stop(self) -> None:
        self._live.stop()


def make_progress(progress: Progress | bool | float | None, logger: logging.Logger) -> Progress:
    """The reporter for ``launch(progress=…)``.

    Args:
        progress: ``None`` (auto: live table when stdout is a terminal, else log lines),
            ``True`` (live table), ``False`` (nothing), a number (log lines every that many
            seconds) or an object with ``start``/``update``/``stop``.
    """
    if progress is None:
        progress = True if sys.stdout.isatty() else 10.0
    if progress is True:
        return LiveProgress()
    if progress is False:
        return NullProgress()
    if isinstance(progress, (int, float)):
        return LogProgress(logger, float(progress))
    for method in ("start", "update", "stop"):
        if not callable(getattr(progress, method, None)):
            raise TypeError(
                f"progress: expected None, a bool, a number of seconds or an object with "
                f"start/update/stop; got {type(progress).__name__}"
            )
    return progress
