"""Exception hierarchy shared by every Kestrel package.

Every error Kestrel raises for user input or a user-code failure derives from
:class:`KestrelError`; the subclasses say which part of a run it concerns. Messages name the
node, the key path and what was expected versus found.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KestrelError",
    "ConfigError",
    "GraphError",
    "SimulatorError",
    "ShapeError",
    "StoreError",
    "EstimatorError",
    "StoreWarning",
    "ReproducibilityWarning",
    "CountError",
    "OutputTypeError",
    "OutOfSupportError",
    "InputWriteError",
    "ProgramError",
]


class KestrelError(Exception):
    """Base class of every Kestrel error."""


class ConfigError(KestrelError, ValueError):
    """A config value is missing, misspelt or invalid. The message starts with the key path."""


class GraphError(KestrelError, ValueError):
    """The graph is inconsistent: unknown node reference, cycle, bad node name, …"""


class SimulatorError(KestrelError):
    """A simulator (or prior) call failed or returned something unusable; names the node."""


class ShapeError(SimulatorError, ValueError):
    """Arrays of a trace or block do not line up; the message carries a table of shapes."""


class StoreError(KestrelError):
    """A sample store operation was given inconsistent data (key schema, ids, statuses)."""


class StoreWarning(UserWarning):
    """A store operation works but wastes data (e.g. an append larger than the buffer)."""


class ReproducibilityWarning(UserWarning):
    """A simulator gives different outputs for identically seeded generators (``--seed``)."""


class EstimatorError(KestrelError):
    """An estimator could not train or sample (e.g. no training samples)."""


class CountError(KestrelError, TypeError, ValueError):
    """A sample count is not a non-negative integer (catch as TypeError or ValueError)."""


class OutputTypeError(SimulatorError, TypeError):
    """User code returned something of the wrong type (``None``, a dict without ``value``, …)."""


class OutOfSupportError(KestrelError, ValueError):
    """A value handed to a prior bijection lies outside the prior's support (or is NaN)."""


class InputWriteError(SimulatorError, ValueError):
    """User code wrote into one of its inputs, which Kestrel hands over read-only.

    The message names the node, the input (which parent) and the remedy: copy it first.
    """


class ProgramError(SimulatorError):
    """A run of an external simulator program (:class:`kestrel_core.Program`) failed.

    A non-zero exit status, a signal, its time limit, or an output that cannot be read or has
    the wrong shape. Unlike other :class:`SimulatorError`\\ s it is a failed *sample*, not a
    misuse: under a node's ``on_error: skip`` its samples are skipped as those of a Python
    simulator that raises. The message names the command, the exit status, the scratch folder
    (kept) and the last lines of the command's stderr.

    Attributes:
        command: the command's words as run. status: its exit status (negative: the signal
            that killed it), or ``"timeout"``. folder: the scratch folder, kept.
        failed: bool ``(n,)``, the samples of the call that failed, when the program ran per
            sample (``None``: the call as a whole). value: ``(n, *D)``, the values of the
            samples that did not fail (anything in the others), or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        command: Any = None,
        status: Any = None,
        folder: str | None = None,
        failed: Any = None,
        value: Any = None,
    ):
        super().__init__(message)
        self.command = command
        self.status = status
        self.folder = folder
        self.failed = failed
        self.value = value
