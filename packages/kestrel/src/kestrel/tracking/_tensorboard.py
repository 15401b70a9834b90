"""TensorBoard: a launch's scalars as event files (``torch.utils.tensorboard.SummaryWriter``).

``tracking: {tensorboard: tb}`` writes ``RUN/tb/events.out.tfevents.*``; open it with
``tensorboard --logdir RUN/tb`` (or a folder above several runs). Each launch adds an event
file to the folder and continues the steps of the one before (the epochs continue on a
resume), so TensorBoard shows one curve per scalar over the run's launches.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kestrel.plot._plot import MissingExtra

if TYPE_CHECKING:  # torch and tensorboard are imported when a launch tracks
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["TensorBoardTracker", "INSTALL_HINT"]

#: seconds between two flushes of the event file (a running launch shows in TensorBoard)
FLUSH_SECONDS = 10
#: what to install for the trackers
INSTALL_HINT = "pip install 'kestrel[tracking]'"


def summary_writer_class() -> type[SummaryWriter]:
    """``torch.utils.tensorboard.SummaryWriter``.

    Raises:
        MissingExtra: the ``tensorboard`` package is not installed (names the install command).
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise MissingExtra(
            f"tracking.tensorboard: TensorBoard tracking needs the tensorboard package: "
            f"{INSTALL_HINT} ({err})"
        ) from None
    return SummaryWriter


class TensorBoardTracker:
    """A :class:`~kestrel.tracking.Tracker` writing TensorBoard event files.

    Args:
        logdir: the folder of the event files (created).
        launch: the launch's number in the run (the step of its ``config`` text).

    Scalars are stored as TensorBoard stores them (32-bit floats); the config is a ``config``
    text (a table of key paths and values) at step ``launch``.

    Raises:
        MissingExtra: the ``tensorboard`` package is not installed.
    """

    def __init__(self, logdir: str | os.PathLike[str], launch: int = 0):
        writer = summary_writer_class()
        self.logdir = os.fspath(logdir)
        self._launch = int(launch)
        self._writer = writer(log_dir=self.logdir, flush_secs=FLUSH_SECONDS)

    def log_params(self, params: Mapping[str, Any]) -> None:
        lines = ["| key | value |", "| --- | --- |"]
        lines += [f"| {key} | {_cell(value)} |" for key, value in params.items()]
        self._writer.add_text("config", "\n".join(lines), global_step=self._launch)

    def log_scalars(
        self, scalars: Mapping[str, float], step: int, walltime: float | None = None
    ) -> None:
        when = time.time() if walltime is None else float(walltime)
        for name, value in scalars.items():
            self._writer.add_scalar(name, float(value), global_step=int(step), walltime=when)

    def close(self, status: str = "finished") -> None:
        self._writer.close()


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
