"""Small numpy-only simulators and priors for tests of code built on kestrel-core.

Every class here is a node's simulator (or a prior-like root) that tests name as a class
(``Spec(models.Noise, {"sigma": 0.1})``) or as a config string
(``_target_: kestrel_core.testing.models.Noise``). kestrel-core is installed wherever Kestrel
runs, so Ray's node actors import them by that name too. Importing this module needs only
numpy and the standard library (never pytest, ray or torch), and nothing here imports
Kestrel: a copy of this file next to a config (``model.py``) is a user's model module.

Simulators that stand for *user code* on purpose (a traceback's frames are the user's only
outside Kestrel's packages) do not belong here.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    # roots and priors
    "Gauss",
    "GaussPrior",
    # deterministic and noisy nodes
    "Shift",
    "Noise",
    "Concat",
    "PerSample",
    "Scalar",
    # building from a config
    "Needs",
    "Inner",
    "Counting",
    # what a node actor receives and returns
    "Doubler",
    "Probe",
    "FakeTensor",
    "Quirky",
    "Ragged",
    "Megabyte",
    # failures: non-finite rows, exceptions, slow calls, dying processes
    "SometimesNaN",
    "AlwaysNaN",
    "FailsLater",
    "BadInit",
    "SlowNoise",
    "CrashOnce",
    "KilledAt",
    "HangsAt",
    "Stall",
    "FAULT_SIGMA",
    "batches",
]


# -- roots and priors ----------------------------------------------------------------------------


class Gauss:
    """Root simulator: ``(n, dim)`` standard normals (no ``log_prob``: not a prior)."""

    def __init__(self, dim=3):
        self.dim = int(dim)

    def simulate_batch(self, n, rng=None):
        return rng.standard_normal((n, self.dim))


class GaussPrior(Gauss):
    """:class:`Gauss` with the standard normal's ``log_prob``: a prior."""

    def log_prob(self, value):
        return -0.5 * (value**2).sum(axis=1) - 0.5 * self.dim * np.log(2 * np.pi)


# -- deterministic and noisy nodes ---------------------------------------------------------------


class Shift:
    """Deterministic ``mu = theta + offset``."""

    def __init__(self, offset=0.0):
        self.offset = float(offset)

    def simulate_batch(self, n, theta):
        return theta + self.offset


class Noise:
    """``x = mu + sigma · N(0, 1)``, drawn from the rng Kestrel passes."""

    def __init__(self, sigma=0.05):
        self.sigma = float(sigma)

    def simulate_batch(self, n, mu, rng=None):
        return mu + self.sigma * rng.standard_normal(mu.shape)


class Concat:
    """``simulate_batch(n, a, b)`` → ``[a, b]`` side by side (checks the parents' order)."""

    def simulate_batch(self, n, a, b):
        return np.concatenate([a, b], axis=1)


class PerSample:
    """Per-sample ``simulate(theta)`` → ``2 * theta``."""

    def simulate(self, theta):
        return 2.0 * theta


class Scalar:
    """Per-sample shape ``()``: the sum of ``theta``'s components."""

    def simulate_batch(self, n, theta):
        return theta.sum(axis=1)


# -- building from a config ----------------------------------------------------------------------


class Needs:
    """Has a required argument ``scale`` and a nested component ``inner``; returns ``scale``."""

    def __init__(self, scale, inner=None):
        self.scale = scale
        self.inner = inner

    def simulate_batch(self, n, rng=None):
        return np.full((n, 1), float(self.scale))


class Inner:
    """A nested component of :class:`Needs` (not a simulator)."""

    def __init__(self, width=1):
        self.width = width


class Counting:
    """Counts constructions (class attribute ``built``) and calls; draws ``(n, 2)`` uniforms."""

    built = 0

    def __init__(self):
        type(self).built += 1
        self.calls = []

    def simulate_batch(self, n, rng=None):
        self.calls.append(n)
        return rng.random((n, 2))


# -- what a node actor receives and returns ------------------------------------------------------


class Doubler:
    """Writes into its input (``a[:, 0] *= 2``) and returns it: the simulator of the read-only input check."""

    def simulate_batch(self, n, a):
        a[:, 0] *= 2
        return a


class Probe:
    """Reports what it received per row: [broadcast?, writeable?, input rows, x[0]]."""

    def simulate_batch(self, n, x):
        out = np.empty((n, 4))
        out[:, 0] = float(x.strides[0] == 0)
        out[:, 1] = float(x.flags.writeable)
        out[:, 2] = x.shape[0]
        out[:, 3] = x[:, 0]
        return out


class FakeTensor:
    """Stands in for a CPU torch tensor: not an ndarray, converts through ``__array__`` only."""

    def __init__(self, data):
        self._data = np.asarray(data)

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)


class Quirky:
    """Another kind of output per ``n`` (each branch below names it), else an array."""

    def simulate_batch(self, n):
        if n == 1:  # a list
            return [0.5]
        if n == 2:  # tensor-like
            return FakeTensor(np.ones((2, 3)))
        if n == 3:  # None
            return None
        if n == 4:  # a dict without 'value'
            return {"values": np.zeros((4, 1))}
        if n == 5:  # a wrong leading dimension
            return np.zeros(2)
        return np.zeros((n, 3))


class Ragged:
    """Per-sample simulator: sample 5 (theta[0] == 5) has shape (9,), the others (10,)."""

    def simulate(self, theta):
        return np.zeros(9 if int(theta[0]) == 5 else 10)


class Megabyte:
    """1 MiB per sample: each of z's two values over half of ``WIDTH`` float64, plus noise
    (``width``: another number of values per sample, a multiple of 1024)."""

    #: values per sample: 131072 float64 = 1 MiB
    WIDTH = 2**17

    def __init__(self, sigma=0.05, width=WIDTH):
        self.sigma = float(sigma)
        self.width = int(width)

    def simulate_batch(self, n, z, rng=None):
        x = np.repeat(z, self.width // 2, axis=1)
        # 1024 draws per sample, tiled: cheap (the tests are about bytes)
        noise = self.sigma * rng.standard_normal((len(x), 1024))
        x += np.tile(noise, self.width // 1024)
        return x


# -- failures: non-finite rows, exceptions, slow calls, dying processes --------------------------


class SometimesNaN(Noise):
    """:class:`Noise`, but ~20 % of the rows NaN and the first row of every call +inf."""

    def simulate_batch(self, n, mu, rng=None):
        x = super().simulate_batch(n, mu, rng)
        x[rng.random(n) < 0.2] = np.nan
        x[0, 0] = np.inf
        return x


class AlwaysNaN:
    """Every simulation is NaN (an all-invalid round is an error naming the node)."""

    def simulate_batch(self, n, z):
        return np.full(z.shape, np.nan)


class FailsLater(Noise):
    """:class:`Noise` that raises on its third call: a simulator failure during resimulation."""

    calls = 0

    def simulate_batch(self, n, mu, rng=None):
        self.calls += 1
        if self.calls >= 3:
            raise RuntimeError("simulator broke on purpose in call 3")
        return super().simulate_batch(n, mu, rng)


class BadInit:
    """A simulator whose constructor raises a TypeError (the original text, with the node)."""

    def __init__(self, sigma=0.1):
        raise TypeError(f"BadInit() got a sigma it cannot use: {sigma!r}")

    def simulate_batch(self, n, z):
        return z


class SlowNoise(Noise):
    """:class:`Noise` whose every call takes ``delay`` seconds more (rounds slower than epochs)."""

    def __init__(self, sigma=0.05, delay=0.1):
        super().__init__(sigma)
        self.delay = float(delay)

    def simulate_batch(self, n, mu, rng=None):
        time.sleep(self.delay)
        return super().simulate_batch(n, mu, rng)


class CrashOnce:
    """``x = mu``, but the first call ever (``marker`` file absent) kills its process."""

    def __init__(self, marker):
        self.marker = str(marker)

    def simulate_batch(self, n, mu):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)  # a crash, not an exception: Ray restarts the actor and retries the call
        return np.array(mu)


#: noise of :class:`KilledAt` and :class:`HangsAt`: ``x = z + FAULT_SIGMA · N(0, 1)``; a row whose
#: ``|x − z|`` exceeds 8 FAULT_SIGMA pairs an x with another sample's z
FAULT_SIGMA = 0.05


def _count(folder: str) -> int:
    """Count one more batch in ``folder`` (a file per batch: survives the process); returns it."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    k = len(list(path.glob("batch-*"))) + 1
    (path / f"batch-{k:05d}").touch()
    return k


def batches(folder) -> int:
    """How many batches the counting simulators (KilledAt, HangsAt) began in ``folder``."""
    return len(list(Path(folder).glob("batch-*")))


class KilledAt:
    """x = z + noise; SIGKILLs its process (as the OOM killer does) at batches ``kill_at``."""

    def __init__(self, folder: str, kill_at: Sequence[int] = ()):
        self.folder = str(folder)
        self.kill_at = {int(k) for k in kill_at}

    def simulate_batch(self, n, z, rng=None):
        # batches are numbered from 1 in ``folder``, over every process of the actor
        k = _count(self.folder)
        if k in self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return z + FAULT_SIGMA * rng.standard_normal(z.shape)


class HangsAt:
    """x = z + noise; the batches numbered in ``hang_at`` sleep ``seconds`` first (a stuck call)."""

    def __init__(self, folder: str, hang_at: Sequence[int] = (), seconds: float = 3600.0):
        self.folder = str(folder)
        self.hang_at = {int(k) for k in hang_at}
        self.seconds = float(seconds)

    def simulate_batch(self, n, z, rng=None):
        if _count(self.folder) in self.hang_at:
            time.sleep(self.seconds)
        return z + FAULT_SIGMA * rng.standard_normal(z.shape)


class Stall:
    """x = z + noise, a simulator that stalls on demand (files decide, so a test can change it
    while a launch runs): every call hangs ``seconds`` while the file ``hang`` exists, and so
    does a call of at least ``hang_rows`` rows (0: none); while the file ``slow`` exists a
    call sleeps ``per_sample`` seconds a row."""

    def __init__(
        self,
        hang: str,
        slow: str = "",
        hang_rows: int = 0,
        per_sample: float = 0.0,
        seconds: float = 3600.0,
    ):
        self.hang, self.slow = str(hang), str(slow)
        self.hang_rows, self.per_sample = int(hang_rows), float(per_sample)
        self.seconds = float(seconds)

    def simulate_batch(self, n, z, rng=None):
        if os.path.exists(self.hang) or (self.hang_rows and n >= self.hang_rows):
            time.sleep(self.seconds)
        if self.slow and os.path.exists(self.slow):
            time.sleep(self.per_sample * n)
        return z + FAULT_SIGMA * rng.standard_normal(z.shape)
