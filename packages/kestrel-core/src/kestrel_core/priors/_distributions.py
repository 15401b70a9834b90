"""Independent 1-D distributions, the building blocks of :class:`kestrel_core.Product`.

Every distribution works on float64 arrays of any shape and provides its support ``[low,
high]`` (closed; ``±inf`` where unbounded), ``sample``, ``log_pdf``, the CDF *and* the survival
function ``cdf_sf`` (each accurate on its own side, so neither tail loses precision), and their
inverses ``ppf``/``isf``. ``normal`` and ``lognormal`` also have a direct map to standard-normal
space (``to_z``/``from_z``), which avoids the CDF route altogether. Inputs outside the support
are the caller's business (:class:`~kestrel_core.Product` checks them); ``log_pdf`` gives
``-inf`` there, including for ``±inf`` and NaN.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError
from kestrel_core.priors._special import log_phi, ndtr, ndtri

__all__ = ["Dist", "make_dist", "PRIOR_TYPES"]


class Dist:
    """Base class. Subclasses set ``name``, ``param_names`` and implement the methods."""

    name = ""
    param_names: tuple[str, ...] = ()
    free = True
    direct = False  # has to_z / from_z

    def __init__(self, where: str, params: Sequence[float]) -> None:
        self.where = where
        self.params = tuple(float(p) for p in params)
        self.low, self.high = -math.inf, math.inf

    def describe(self) -> str:
        """``"uniform low=0.0, high=1.0"``."""
        args = ", ".join(f"{k}={v!r}" for k, v in zip(self.param_names, self.params))
        return f"{self.name} {args}"

    def in_support(self, x: np.ndarray) -> np.ndarray:
        return np.isfinite(x) & (x >= self.low) & (x <= self.high)

    def _fail(self, message: str) -> None:
        raise ConfigError(f"{self.where}: {self.name} {message}")

    def _clip(self, x: np.ndarray) -> np.ndarray:
        # guards the inverse maps against rounding one ulp past a bound (not a clamp of input)
        return np.clip(x, self.low, self.high)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        u = rng.random(n)
        return np.where(u <= 0.5, self.ppf(u), self.isf(1.0 - u))

    # the interface every subclass implements (float64 arrays of any shape, elementwise)
    def log_pdf(self, x: np.ndarray) -> np.ndarray:
        """Log density at ``x``; ``-inf`` outside the support, at ``±inf`` and at NaN."""
        raise NotImplementedError

    def cdf_sf(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(cdf, sf)`` at ``x``, each accurate on its own side."""
        raise NotImplementedError

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Inverse of the CDF, ``u`` in ``[0, 1]``."""
        raise NotImplementedError

    def isf(self, s: np.ndarray) -> np.ndarray:
        """Inverse of the survival function, ``s`` in ``[0, 1]``."""
        raise NotImplementedError

    # only where ``direct`` is true: the exact map to and from standard-normal space
    def to_z(self, x: np.ndarray) -> np.ndarray:
        """Standard-normal latent of ``x`` (``direct`` distributions only)."""
        raise NotImplementedError

    def from_z(self, z: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`to_z`."""
        raise NotImplementedError

    def log_dz_dx(self, x: np.ndarray) -> np.ndarray:
        """``log |dz/dx|`` of :meth:`to_z` at ``x``."""
        raise NotImplementedError


class Uniform(Dist):
    name, param_names = "uniform", ("low", "high")

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        self.low, self.high = self.params
        if not self.low < self.high:
            self._fail(f"low={self.low!r} must be < high={self.high!r}")
        self.width = self.high - self.low

    def log_pdf(self, x):
        return np.where(self.in_support(x), -math.log(self.width), -np.inf)

    def cdf_sf(self, x):
        return (x - self.low) / self.width, (self.high - x) / self.width

    def ppf(self, u):
        return self._clip(self.low + u * self.width)

    def isf(self, s):
        return self._clip(self.high - s * self.width)


class Normal(Dist):
    name, param_names, direct = "normal", ("mean", "std"), True

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        self.mean, self.std = self.params
        if not self.std > 0:
            self._fail(f"std={self.std!r} must be > 0")

    def to_z(self, x):
        return (x - self.mean) / self.std

    def from_z(self, z):
        return self.mean + self.std * z

    def log_dz_dx(self, x):
        return np.full(np.shape(x), -math.log(self.std))

    def log_pdf(self, x):
        return np.where(self.in_support(x), log_phi(self.to_z(x)) - math.log(self.std), -np.inf)

    def cdf_sf(self, x):
        z = self.to_z(x)
        return ndtr(z), ndtr(-z)

    def ppf(self, u):
        return self.from_z(ndtri(u))

    def isf(self, s):
        return self.from_z(-ndtri(s))

    def sample(self, rng, n):
        return rng.normal(self.mean, self.std, n)


class LogNormal(Dist):
    name, param_names, direct = "lognormal", ("mu", "sigma"), True

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        self.mu, self.sigma = self.params
        if not self.sigma > 0:
            self._fail(f"sigma={self.sigma!r} must be > 0")
        self.low = 0.0

    def to_z(self, x):
        return (np.log(x) - self.mu) / self.sigma

    def from_z(self, z):
        return np.exp(self.mu + self.sigma * z)

    def log_dz_dx(self, x):
        return -math.log(self.sigma) - np.log(x)

    def log_pdf(self, x):
        ok = self.in_support(x) & (x > 0)
        return np.where(ok, log_phi(self.to_z(x)) + self.log_dz_dx(x), -np.inf)

    def cdf_sf(self, x):
        z = self.to_z(x)
        return ndtr(z), ndtr(-z)

    def ppf(self, u):
        return self.from_z(ndtri(u))

    def isf(self, s):
        return self.from_z(-ndtri(s))

    def sample(self, rng, n):
        return rng.lognormal(self.mu, self.sigma, n)


class LogUniform(Dist):
    name, param_names = "loguniform", ("low", "high")

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        self.low, self.high = self.params
        if not self.low > 0:
            self._fail(f"low={self.low!r} must be > 0")
        if not self.low < self.high:
            self._fail(f"low={self.low!r} must be < high={self.high!r}")
        self.log_ratio = math.log(self.high / self.low)

    def log_pdf(self, x):
        ok = self.in_support(x)
        return np.where(ok, -np.log(np.where(ok, x, 1.0)) - math.log(self.log_ratio), -np.inf)

    def cdf_sf(self, x):
        return np.log(x / self.low) / self.log_ratio, np.log(self.high / x) / self.log_ratio

    def ppf(self, u):
        return self._clip(self.low * np.exp(u * self.log_ratio))

    def isf(self, s):
        return self._clip(self.high * np.exp(-s * self.log_ratio))


class Cosine(Dist):
    """pdf ∝ sin(α) with α = π(x − low)/(high − low) ∈ [0, π]: CDF sin²(α/2)."""

    name, param_names = "cosine", ("low", "high")

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        self.low, self.high = self.params
        if not self.low < self.high:
            self._fail(f"low={self.low!r} must be < high={self.high!r}")
        self.width = self.high - self.low

    def log_pdf(self, x):
        ok = self.in_support(x)
        # sin(α) = sin(π − α): use the angle measured from the nearer bound for precision
        near = np.minimum(x - self.low, self.high - x) * (math.pi / self.width)
        with np.errstate(divide="ignore"):
            val = np.log(np.sin(np.where(ok, near, 1.0))) + math.log(math.pi / (2 * self.width))
        return np.where(ok, val, -np.inf)

    def cdf_sf(self, x):
        half = 0.5 * math.pi / self.width
        return np.sin((x - self.low) * half) ** 2, np.sin((self.high - x) * half) ** 2

    def ppf(self, u):
        return self._clip(self.low + (2 * self.width / math.pi) * np.arcsin(np.sqrt(u)))

    def isf(self, s):
        return self._clip(self.high - (2 * self.width / math.pi) * np.arcsin(np.sqrt(s)))


class Triangular(Dist):
    name, param_names = "triangular", ("a", "c", "b")

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        self.a, self.c, self.b = self.params
        if not self.a < self.b:
            self._fail(f"a={self.a!r} must be < b={self.b!r}")
        if not self.a <= self.c <= self.b:
            self._fail(f"c={self.c!r} must lie in [a={self.a!r}, b={self.b!r}]")
        self.low, self.high = self.a, self.b
        self.left = (self.b - self.a) * (self.c - self.a)  # 0 when c == a
        self.right = (self.b - self.a) * (self.b - self.c)  # 0 when c == b
        self.f_c = (self.c - self.a) / (self.b - self.a)  # CDF at the mode

    def log_pdf(self, x):
        ok = self.in_support(x)
        rising = (x < self.c) & (self.left > 0)
        dens = np.where(
            rising, 2 * (x - self.a) / (self.left or 1.0), 2 * (self.b - x) / (self.right or 1.0)
        )
        dens = np.where(x == self.c, 2 / (self.b - self.a), dens)
        with np.errstate(divide="ignore"):
            return np.where(ok, np.log(np.where(ok, dens, 1.0)), -np.inf)

    def cdf_sf(self, x):
        lo = (x - self.a) ** 2 / (self.left or 1.0)
        hi = (self.b - x) ** 2 / (self.right or 1.0)
        left_side = x <= self.c
        lo = np.where(left_side & (self.left > 0), lo, 0.0)
        hi = np.where(~left_side & (self.right > 0), hi, 0.0)
        cdf = np.where(left_side, lo, 1.0 - hi)
        sf = np.where(left_side, 1.0 - lo, hi)
        return cdf, sf

    def ppf(self, u):
        lo = self.a + np.sqrt(u * self.left)
        hi = self.b - np.sqrt((1.0 - u) * self.right)
        return self._clip(np.where(u <= self.f_c, lo, hi))

    def isf(self, s):
        hi = self.b - np.sqrt(s * self.right)
        lo = self.a + np.sqrt((1.0 - s) * self.left)
        return self._clip(np.where(s <= 1.0 - self.f_c, hi, lo))

    def sample(self, rng, n):
        return rng.triangular(self.a, self.c, self.b, n)


class Fixed(Dist):
    """A constant; excluded from the latent spaces."""

    name, param_names, free = "fixed", ("value",), False

    def __init__(self, where: str, params: Sequence[float]) -> None:
        super().__init__(where, params)
        (self.value,) = self.params
        self.low = self.high = self.value

    def log_pdf(self, x):
        return np.where(x == self.value, 0.0, -np.inf)

    def sample(self, rng, n):
        return np.full(n, self.value)


PRIOR_TYPES: dict[str, Callable[[str, Sequence[float]], Dist]] = {
    cls.name: cls for cls in (Uniform, Normal, LogNormal, LogUniform, Cosine, Triangular, Fixed)
}


def _number(where: str, kind: str, name: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{where}: {kind} {name}={value!r} is not a number")
    if not math.isfinite(float(value)):
        raise ConfigError(f"{where}: {kind} {name}={value!r} must be finite")
    return float(value)


def make_dist(where: str, entry: Any) -> Dist:
    """Parse one prior entry ``[type, *params]``.

    Args:
        where: key path for error messages, e.g. ``"priors[0]"``.
        entry: a list/tuple (or OmegaConf ListConfig) ``[type, *params]``.

    Raises:
        ConfigError: not a list, unknown type (with a suggestion), wrong parameter count, a
            parameter that is not a finite number, or invalid values (``low ≥ high``, a scale
            ≤ 0, ``loguniform`` with ``low ≤ 0``, a mode outside ``[a, b]``).
    """
    if isinstance(entry, (str, bytes)) or not hasattr(entry, "__iter__") or isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a list [type, *params], got {entry!r}")
    items = list(entry)
    if not items or not isinstance(items[0], str):
        raise ConfigError(
            f"{where}: expected a list [type, *params] starting with the type name, got {items!r}"
        )
    kind, raw = items[0], items[1:]
    if kind not in PRIOR_TYPES:
        close = difflib.get_close_matches(kind.lower(), list(PRIOR_TYPES), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{where}: unknown prior type {kind!r}{hint} (known: {', '.join(PRIOR_TYPES)})"
        )
    cls = PRIOR_TYPES[kind]
    names = cls.param_names  # type: ignore[attr-defined]
    if len(raw) != len(names):
        raise ConfigError(
            f"{where}: {kind} takes {len(names)} parameters ({', '.join(names)}), "
            f"got {len(raw)}: {raw!r}"
        )
    return cls(where, [_number(where, kind, k, v) for k, v in zip(names, raw)])
