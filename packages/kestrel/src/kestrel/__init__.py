"""Kestrel, the application: the ``kestrel`` command and the run directory it works on.

Simulation-based inference on a graph of simulators: :func:`launch` trains every estimator of a
run's graph on Ray while simulations from the current proposal keep arriving, and
:func:`sample_run` draws samples of a trained run into it; :func:`open_run` gives a trained run
as a Python object (:class:`Run`: its posterior's draws and densities as arrays, for
notebooks); :func:`import_simulations` brings simulations made elsewhere into a new run as its
initial rows. Built on the three libraries
:mod:`kestrel_core` (numpy), :mod:`kestrel_ray` and :mod:`kestrel_torch`.

Importing this package imports neither ray nor torch; each name is imported on first use
(PEP 562), so the ``kestrel`` command starts fast.
"""

from importlib import import_module
from typing import Any

from kestrel.__about__ import __version__

#: public name → the module that defines it
_HOMES = {
    "launch": "kestrel.controller._launch",
    "RunResult": "kestrel.controller._result",
    "sample_run": "kestrel.sample._sampling",
    "SampleResult": "kestrel.sample._sampling",
    "open_run": "kestrel.run._run",
    "Run": "kestrel.run._run",
    "Posterior": "kestrel.run._run",
    "Prior": "kestrel.run._run",
    "RunDir": "kestrel.rundir._rundir",
    "import_simulations": "kestrel.importing._import",
    "ImportResult": "kestrel.importing._import",
    "RunError": "kestrel_ray",
    "main": "kestrel.cli",
}
__all__ = ["__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kestrel' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
