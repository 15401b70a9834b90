"""Product of independent 1-D priors, with its log density and bijections to latent spaces.

Shape symbols: ``...`` any batch shape (usually ``(N,)``), ``F`` the full parameter dimension
(every entry), ``D`` the free dimension (entries that are not ``fixed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kestrel_core._errors import ConfigError, OutOfSupportError, ShapeError
from kestrel_core.execute._boundary import check_count
from kestrel_core.priors._distributions import Dist, make_dist
from kestrel_core.priors._special import U_MIN, Z_MAX, log_phi, ndtr, ndtri

__all__ = ["Product", "prior_from_spec"]


def _float_array(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    return arr if arr.dtype.kind == "f" else arr.astype(np.float64)


class Product:
    """Independent 1-D priors ``[type, *params]``, one per entry of a parameter vector.

    Types (support in brackets): ``uniform(low, high)`` [low, high]; ``normal(mean, std)`` ℝ;
    ``lognormal(mu, sigma)`` [0, ∞); ``loguniform(low, high)`` [low, high], ``low > 0``;
    ``cosine(low, high)`` [low, high] with pdf ∝ sin(π(x − low)/(high − low));
    ``triangular(a, c, b)`` [a, b] with mode c; ``fixed(value)``, a constant that is left out
    of the latent spaces (``D`` counts the other entries).

    The bijections work on the free entries: ``to_unit`` maps to the CDF values in ``[0, 1]^D``;
    ``to_normal`` maps to standard-normal space ``z = Φ⁻¹(F(θ))`` — directly for ``normal``
    (affine) and ``lognormal`` (log, then affine), through each side's own tail probability for
    the others, so neither tail loses precision. Latents are clipped to ``[-Z_MAX, Z_MAX]``
    (``Z_MAX = 37``, where Φ reaches ≈ 5.7e-300), so the bounds of a bounded prior map to
    finite latents in float32 and float64; the round trip of interior points is exact to about
    1e-13 in float64. Computation is in float64; outputs keep the floating dtype of the input
    (integers become float64). Values outside the support get ``log_prob`` −inf (row by row,
    never an error: a density evaluation) and are refused by the bijections, which raise
    :class:`OutOfSupportError` naming the entry, the value and the bounds — they are never
    clamped; the one allowance is
    that a float32 (or narrower) value equal to a bound rounded to that dtype counts as the
    bound, so ``to_normal(from_normal(z))`` also works in float32 for bounds like ``0.7``.

    A Product is also a :class:`~kestrel_core.Simulator` (``simulate_batch(n, rng=None)``), the
    simulator of a latent root node.

    Args:
        priors: one ``[type, *params]`` list per entry, e.g. ``[["uniform", 0, 1]]``.

    Raises:
        ConfigError: invalid entries, naming ``priors[i]`` and the values
            ("priors[0]: uniform low=1.0 must be < high=0.0").

    Example:
        >>> prior = Product([["uniform", 0.0, 1.0], ["fixed", 2.0], ["normal", 0.0, 1.0]])
        >>> prior.full_dim, prior.dim, prior.free.tolist()
        (3, 2, [True, False, True])
        >>> z = prior.to_normal(np.array([[0.5, 2.0, 1.5]]))
        >>> z.round(6).tolist()
        [[0.0, 1.5]]
        >>> prior.from_normal(z).tolist()
        [[0.5, 2.0, 1.5]]
    """

    def __init__(self, priors: Sequence[Sequence[Any]]) -> None:
        self._setup(priors, "priors")

    def _setup(self, priors: Any, path: str) -> None:
        if isinstance(priors, (str, bytes, Mapping)) or not hasattr(priors, "__iter__"):
            raise ConfigError(f"{path}: expected a list of [type, *params] entries, got {priors!r}")
        self.dists: tuple[Dist, ...] = tuple(
            dist for i, e in enumerate(priors) for dist in _entries(f"{path}[{i}]", e)
        )
        if not self.dists:
            raise ConfigError(f"{path}: needs at least one entry")
        self.full_dim = len(self.dists)
        self.free = np.array([d.free for d in self.dists], dtype=bool)
        self.dim = int(self.free.sum())
        self.low = np.array([d.low for d in self.dists], dtype=np.float64)
        self.high = np.array([d.high for d in self.dists], dtype=np.float64)
        self._free_idx = np.flatnonzero(self.free)

    @property
    def specs(self) -> list[list[Any]]:
        """The entries as plain lists ``[type, *params]`` (floats)."""
        return [[d.name, *d.params] for d in self.dists]

    def to_config(self) -> dict[str, Any]:
        """The config of this prior: ``{"_target_": "kestrel_core.Product", "priors": [...]}``,
        a run of equal entries written once with ``{repeat: k}``; building it gives the same
        prior (the form :meth:`kestrel_core.Graph.to_yaml` records a Product instance in)."""
        runs: list[tuple[list[Any], int]] = []
        for spec in self.specs:
            if runs and runs[-1][0] == spec:
                runs[-1] = (spec, runs[-1][1] + 1)
            else:
                runs.append((spec, 1))
        priors = [spec if k == 1 else [*spec, {"repeat": k}] for spec, k in runs]
        return {"_target_": "kestrel_core.Product", "priors": priors}

    def __repr__(self) -> str:
        return f"Product({self.specs!r})"

    # -- sampling and density ---------------------------------------------------------------

    def sample(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Draw ``n`` parameter vectors.

        Args:
            n: number of samples (a non-negative integer).
            rng: generator to draw from; a fresh, unseeded one if ``None``.

        Returns:
            float64 array, shape ``(n, F)``.

        Raises:
            TypeError, ValueError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        rng = np.random.default_rng() if rng is None else rng
        out = np.empty((n, self.full_dim), dtype=np.float64)
        for j, dist in enumerate(self.dists):
            out[:, j] = dist.sample(rng, n)
        return out

    def simulate_batch(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Simulator protocol: the same as :meth:`sample`, float64 ``(n, F)``."""
        return self.sample(n, rng)

    def log_prob(self, theta: ArrayLike) -> np.ndarray:
        """Log density of the free entries (fixed entries contribute 0 where they match).

        Args:
            theta: array, shape ``(..., F)``.

        Returns:
            float64 array, shape ``(...)``; ``-inf`` outside the support (also for ±inf, NaN).

        Raises:
            ShapeError: the last axis is not ``F``.
        """
        x = self._snap(self._check_shape(theta, self.full_dim, "theta"))
        out = np.zeros(x.shape[:-1])
        with np.errstate(all="ignore"):
            for j, dist in enumerate(self.dists):
                out += dist.log_pdf(x[..., j])
        return out

    # -- bijections -------------------------------------------------------------------------

    def to_unit(self, theta: ArrayLike, with_logdet: bool = False):
        """Map to the unit hypercube with each free entry's CDF.

        Args:
            theta: array, shape ``(..., F)``, within the support.
            with_logdet: also return ``log|det ∂u/∂θ|``.

        Returns:
            ``u``, shape ``(..., D)`` in ``[0, 1]``, dtype of ``theta``; with ``with_logdet``
            the tuple ``(u, logdet)`` with ``logdet`` of shape ``(...)``.

        Raises:
            ShapeError: the last axis is not ``F``.
            OutOfSupportError: a value lies outside the support (names entry, value, bounds).
        """
        x, dtype = self._check_support(theta)
        u = np.empty(x.shape[:-1] + (self.dim,))
        logdet = np.zeros(x.shape[:-1])
        with np.errstate(all="ignore"):
            for k, j in enumerate(self._free_idx):
                dist, col = self.dists[j], x[..., j]
                u[..., k] = np.clip(dist.cdf_sf(col)[0], 0.0, 1.0)
                logdet += dist.log_pdf(col)
        return self._out(u, logdet, dtype, with_logdet)

    def from_unit(self, u: ArrayLike, with_logdet: bool = False):
        """Inverse of :meth:`to_unit`; fixed entries are re-inserted.

        Args:
            u: array, shape ``(..., D)`` with values in ``[0, 1]``.
            with_logdet: also return ``log|det ∂θ/∂u|``.

        Returns:
            ``theta`` of shape ``(..., F)`` (dtype of ``u``), or ``(theta, logdet (...))``.

        Raises:
            ShapeError: the last axis is not ``D``.
            OutOfSupportError: a value outside ``[0, 1]`` or NaN (names the latent index).
        """
        u_in = self._check_shape(u, self.dim, "u")
        dtype = u_in.dtype
        uu = u_in.astype(np.float64, copy=False)
        bad = ~((uu >= 0.0) & (uu <= 1.0))
        if bad.any():
            self._raise_latent(uu, bad, "u", "[0, 1]")
        x = self._fixed_filled(uu.shape[:-1])
        logdet = np.zeros(uu.shape[:-1])
        with np.errstate(all="ignore"):
            for k, j in enumerate(self._free_idx):
                dist, col = self.dists[j], uu[..., k]
                x[..., j] = np.where(col <= 0.5, dist.ppf(col), dist.isf(1.0 - col))
                logdet -= dist.log_pdf(x[..., j])
        return self._out(x, logdet, dtype, with_logdet)

    def to_normal(self, theta: ArrayLike, with_logdet: bool = False):
        """Map to standard-normal space, ``z = Φ⁻¹(F(θ))`` per free entry.

        Args:
            theta: array, shape ``(..., F)``, within the support.
            with_logdet: also return ``log|det ∂z/∂θ|``, which turns a density in z-space into
                one in θ-space: ``log p_θ(θ) = log p_z(z) + logdet``.

        Returns:
            ``z``, shape ``(..., D)``, finite (clipped to ``±Z_MAX``), dtype of ``theta``; or
            ``(z, logdet (...))``.

        Raises:
            ShapeError: the last axis is not ``F``.
            OutOfSupportError: a value lies outside the support (names entry, value, bounds).
        """
        x, dtype = self._check_support(theta)
        z = np.empty(x.shape[:-1] + (self.dim,))
        logdet = np.zeros(x.shape[:-1])
        with np.errstate(all="ignore"):
            for k, j in enumerate(self._free_idx):
                dist, col = self.dists[j], x[..., j]
                if dist.direct:
                    zk = np.clip(dist.to_z(col), -Z_MAX, Z_MAX)
                    logdet += dist.log_dz_dx(col)
                else:
                    cdf, sf = dist.cdf_sf(col)
                    lower = cdf <= sf
                    zk = ndtri(np.maximum(np.where(lower, cdf, sf), U_MIN))
                    zk = np.where(lower, zk, -zk)
                    logdet += dist.log_pdf(col) - log_phi(zk)
                z[..., k] = zk
        return self._out(z, logdet, dtype, with_logdet)

    def from_normal(self, z: ArrayLike, with_logdet: bool = False):
        """Inverse of :meth:`to_normal`; fixed entries are re-inserted.

        Args:
            z: array, shape ``(..., D)``; a latent at or beyond ``∓Z_MAX`` maps to a finite
                lower/upper bound exactly (and ``±inf`` to the bounds).
            with_logdet: also return ``log|det ∂θ/∂z|``.

        Returns:
            ``theta`` of shape ``(..., F)`` (dtype of ``z``), or ``(theta, logdet (...))``.

        Raises:
            ShapeError: the last axis is not ``D``.
            OutOfSupportError: a NaN latent (names the latent index).
        """
        z_in = self._check_shape(z, self.dim, "z")
        dtype = z_in.dtype
        zz = z_in.astype(np.float64, copy=False)
        bad = np.isnan(zz)
        if bad.any():
            self._raise_latent(zz, bad, "z", "(-inf, inf)")
        x = self._fixed_filled(zz.shape[:-1])
        logdet = np.zeros(zz.shape[:-1])
        with np.errstate(all="ignore"):
            for k, j in enumerate(self._free_idx):
                dist, col = self.dists[j], zz[..., k]
                if dist.direct:
                    xj = dist.from_z(col)
                else:
                    xj = np.where(col <= 0, dist.ppf(ndtr(col)), dist.isf(ndtr(-col)))
                # a clipped latent stands for its bound: the bounds round-trip exactly
                if np.isfinite(dist.low):
                    xj = np.where(col <= -Z_MAX, dist.low, xj)
                if np.isfinite(dist.high):
                    xj = np.where(col >= Z_MAX, dist.high, xj)
                if dist.direct:
                    logdet -= dist.log_dz_dx(xj)
                else:
                    logdet += log_phi(col) - dist.log_pdf(xj)
                x[..., j] = xj
        return self._out(x, logdet, dtype, with_logdet)

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _check_shape(arr: ArrayLike, last: int, name: str) -> np.ndarray:
        a = _float_array(arr)
        if a.ndim == 0 or a.shape[-1] != last:
            raise ShapeError(f"{name} has shape {a.shape}; expected (..., {last})")
        return a

    def _check_support(self, theta: ArrayLike) -> tuple[np.ndarray, np.dtype]:
        a = self._check_shape(theta, self.full_dim, "theta")
        x = self._snap(a)
        for j, dist in enumerate(self.dists):
            col = x[..., j]
            with np.errstate(invalid="ignore"):
                bad = ~dist.in_support(col) if dist.free else col != dist.value  # type: ignore[attr-defined]
            if bad.any():
                k = int(np.flatnonzero(bad.reshape(-1))[0])
                where = np.unravel_index(k, col.shape) if col.ndim else ()
                value = str(a[..., j].reshape(-1)[k])  # str: shortest repr in the input dtype
                raise OutOfSupportError(
                    f"priors[{j}] ({dist.describe()}): value {value} of sample "
                    f"{where[0] if len(where) == 1 else where} is outside the support "
                    f"[{dist.low!r}, {dist.high!r}]"
                )
        return x, a.dtype

    def _snap(self, a: np.ndarray) -> np.ndarray:
        """float64 copy of ``a``; for a narrower float dtype, a value between a bound and that
        bound rounded to the dtype (e.g. ``float32(0.7) < 0.7``) is taken as the bound."""
        x = a.astype(np.float64, copy=False)
        if a.dtype == np.float64:
            return x
        with np.errstate(over="ignore"):
            low_r = self.low.astype(a.dtype).astype(np.float64)
            high_r = self.high.astype(a.dtype).astype(np.float64)
        x = np.where((x < self.low) & (x >= low_r), self.low, x)
        return np.where((x > self.high) & (x <= high_r), self.high, x)

    def _raise_latent(self, arr: np.ndarray, bad: np.ndarray, name: str, bounds: str) -> None:
        idx = np.argwhere(bad)[0]
        k = int(idx[-1])
        entry = int(self._free_idx[k])
        raise OutOfSupportError(
            f"{name}[..., {k}] (priors[{entry}], {self.dists[entry].describe()}): value "
            f"{str(arr[tuple(idx)])} of sample {tuple(int(i) for i in idx[:-1])} is outside {bounds}"
        )

    def _fixed_filled(self, batch: tuple[int, ...]) -> np.ndarray:
        x = np.empty(batch + (self.full_dim,))
        for j, dist in enumerate(self.dists):
            if not dist.free:
                x[..., j] = dist.value  # type: ignore[attr-defined]
        return x

    @staticmethod
    def _out(arr: np.ndarray, logdet: np.ndarray, dtype: np.dtype, with_logdet: bool):
        arr = arr.astype(dtype, copy=False)
        return (arr, logdet.astype(dtype, copy=False)) if with_logdet else arr


def _entries(where: str, entry: Any) -> list[Dist]:
    """One entry ``[type, *params]``, or ``[type, *params, {repeat: k}]`` for ``k`` copies."""
    items = list(entry) if isinstance(entry, Sequence) or hasattr(entry, "_iter_ex") else None
    if items and _is_mapping(items[-1]):
        options = dict(items[-1])
        unknown = sorted(set(options) - {"repeat"})
        if unknown:
            raise ConfigError(
                f"{where}: unknown entry option {unknown[0]!r}; the one option is "
                f"{{repeat: k}} (k copies of the entry), e.g. [normal, 0.0, 1.0, {{repeat: 10}}]"
            )
        k = options["repeat"]
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"{where}: repeat must be a positive integer, got {k!r}")
        dist = make_dist(where, items[:-1])
        return [dist] * k
    return [make_dist(where, entry)]


def _is_mapping(value: Any) -> bool:
    return isinstance(value, Mapping) or type(value).__name__ == "DictConfig"


def prior_from_spec(spec: Any, *, path: str = "priors") -> Product:
    """Build a :class:`Product` from a config value.

    Args:
        spec: a :class:`Product` (returned unchanged), a list of ``[type, *params]`` entries,
            or a mapping with key ``priors`` (other keys such as ``_target_`` are ignored).
        path: key path used in error messages, e.g. ``"graph.theta.simulator.priors"``.

    Raises:
        ConfigError: invalid entries, naming ``{path}[i]`` and the values.

    Example:
        >>> prior_from_spec([["uniform", 1.0, 0.0]], path="graph.z.simulator.priors")
        Traceback (most recent call last):
        ...
        kestrel_core._errors.ConfigError: graph.z.simulator.priors[0]: uniform low=1.0 must be < high=0.0
    """
    if isinstance(spec, Product):
        return spec
    if isinstance(spec, Mapping) or hasattr(spec, "keys"):
        if "priors" not in spec:
            raise ConfigError(f"{path}: mapping has no key 'priors' (keys: {sorted(spec.keys())})")
        spec = spec["priors"]
    prior = Product.__new__(Product)
    prior._setup(spec, path)
    return prior
