"""A correlated Gaussian prior, ``θ ~ N(mean, cov)``: the prior of a latent root node.

It offers what :class:`~kestrel_core.Product` offers to estimators and the graph (``dim``,
``full_dim``, ``sample``/``simulate_batch``, ``log_prob``, ``to_normal``/``from_normal``,
``to_unit``/``from_unit``), with the whitening map ``z = L⁻¹(θ − mean)`` where ``L`` is the
lower Cholesky factor of ``cov`` — so standard-normal space is exactly the prior's own space.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kestrel_core._errors import ConfigError, OutOfSupportError, ShapeError
from kestrel_core.execute._boundary import check_count
from kestrel_core.priors._special import ndtr, ndtri

__all__ = ["MultivariateNormal"]

_LOG_2PI = float(np.log(2.0 * np.pi))


class MultivariateNormal:
    """``θ ~ N(mean, cov)`` in ``D`` dimensions (every entry free, support ``ℝ^D``).

    Config::

        theta:
          simulator:
            _target_: kestrel_core.MultivariateNormal
            mean: [0.0, 0.0]
            cov: [[1.0, 0.8], [0.8, 1.0]]

    Computation is in float64; the bijections keep the floating dtype of their input (integers
    become float64), like :class:`~kestrel_core.Product`.

    Args:
        mean: the mean, shape ``(D,)``.
        cov: the covariance, shape ``(D, D)``, symmetric positive definite.

    Raises:
        ConfigError: shapes that do not match, non-finite values, or a covariance that is not
            symmetric positive definite (naming ``mean``/``cov``).

    Example:
        >>> prior = MultivariateNormal([1.0, -1.0], [[4.0, 1.0], [1.0, 1.0]])
        >>> z = prior.to_normal(np.array([[1.0, -1.0]]))
        >>> z.tolist(), prior.from_normal(z).tolist()
        ([[0.0, 0.0]], [[1.0, -1.0]])
    """

    def __init__(self, mean: Sequence[float], cov: Sequence[Sequence[float]]) -> None:
        mu = _finite_array("mean", mean)
        sigma = _finite_array("cov", cov)
        if mu.ndim != 1 or mu.size == 0:
            raise ConfigError(f"mean: expected a list of D numbers, got shape {mu.shape}")
        d = mu.size
        if sigma.shape != (d, d):
            raise ConfigError(
                f"cov: expected a {d}×{d} matrix (mean has {d} entries), got shape {sigma.shape}"
            )
        if not np.allclose(sigma, sigma.T, rtol=1e-10, atol=1e-12 * float(np.abs(sigma).max())):
            raise ConfigError("cov: must be symmetric (cov[i][j] == cov[j][i])")
        try:
            chol = np.linalg.cholesky(sigma)
        except np.linalg.LinAlgError as err:
            raise ConfigError(
                "cov: must be positive definite (its Cholesky factor failed)"
            ) from err
        self.mean = mu
        self.cov = sigma
        self._chol = chol
        self._chol_inv = np.linalg.inv(chol)
        self._log_det_chol = float(np.log(np.diag(chol)).sum())
        self.dim = self.full_dim = d
        self.free = np.ones(d, dtype=bool)
        self.low = np.full(d, -np.inf)
        self.high = np.full(d, np.inf)

    def __repr__(self) -> str:
        return f"MultivariateNormal(mean={self.mean.tolist()!r}, cov={self.cov.tolist()!r})"

    # -- sampling and density ---------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Draw ``n`` vectors: float64, shape ``(n, D)``.

        Raises:
            TypeError, ValueError: ``n`` is not a non-negative integer.
        """
        n = check_count(n)
        rng = np.random.default_rng() if rng is None else rng
        return self.mean + rng.standard_normal((n, self.dim)) @ self._chol.T

    def simulate_batch(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Simulator protocol: the same as :meth:`sample`, float64 ``(n, D)``."""
        return self.sample(n, rng)

    def log_prob(self, theta: ArrayLike) -> np.ndarray:
        """Log density, float64 of shape ``(...)`` for ``theta`` of shape ``(..., D)``;
        ``-inf`` at NaN or ±inf.

        Raises:
            ShapeError: the last axis is not ``D``.
        """
        x = self._check_shape(theta, "theta").astype(np.float64, copy=False)
        z = (x - self.mean) @ self._chol_inv.T
        with np.errstate(invalid="ignore"):
            out = -0.5 * (z * z).sum(-1) - self._log_det_chol - 0.5 * self.dim * _LOG_2PI
        return np.where(np.isfinite(x).all(-1), out, -np.inf)

    # -- bijections -------------------------------------------------------------------------
    def to_normal(self, theta: ArrayLike, with_logdet: bool = False):
        """Whiten: ``z = L⁻¹(θ − mean)``, shape ``(..., D)``, dtype of ``theta``; with
        ``with_logdet`` also ``log|det ∂z/∂θ| = −log|det L|`` of shape ``(...)``.

        Raises:
            ShapeError: the last axis is not ``D``.
            OutOfSupportError: a non-finite value (naming the entry).
        """
        x_in = self._check_shape(theta, "theta")
        x = x_in.astype(np.float64, copy=False)
        self._check_finite(x, "theta")
        z = (x - self.mean) @ self._chol_inv.T
        return _out(z, -self._log_det_chol, x_in.dtype, with_logdet)

    def from_normal(self, z: ArrayLike, with_logdet: bool = False):
        """Inverse of :meth:`to_normal`: ``θ = mean + L z``; ``log|det ∂θ/∂z| = log|det L|``.

        Raises:
            ShapeError: the last axis is not ``D``.
            OutOfSupportError: a non-finite latent (naming the entry).
        """
        z_in = self._check_shape(z, "z")
        zz = z_in.astype(np.float64, copy=False)
        self._check_finite(zz, "z")
        x = self.mean + zz @ self._chol.T
        return _out(x, self._log_det_chol, z_in.dtype, with_logdet)

    def to_unit(self, theta: ArrayLike, with_logdet: bool = False):
        """``u = Φ(z)`` per whitened entry, in ``[0, 1]^D`` (see :meth:`to_normal`)."""
        z, logdet = self.to_normal(np.asarray(theta), with_logdet=True)
        zz = np.asarray(z, dtype=np.float64)
        u = ndtr(zz)
        logdet = np.asarray(logdet, dtype=np.float64) - 0.5 * (zz * zz).sum(-1)
        logdet = logdet - 0.5 * self.dim * _LOG_2PI
        return _out(u, logdet, np.asarray(z).dtype, with_logdet)

    def from_unit(self, u: ArrayLike, with_logdet: bool = False):
        """Inverse of :meth:`to_unit`.

        Raises:
            ShapeError: the last axis is not ``D``.
            OutOfSupportError: a value outside ``[0, 1]`` or NaN.
        """
        u_in = self._check_shape(u, "u")
        uu = u_in.astype(np.float64, copy=False)
        bad = ~((uu >= 0.0) & (uu <= 1.0))
        if bad.any():
            k = int(np.argwhere(bad)[0][-1])
            raise OutOfSupportError(f"u[..., {k}]: value outside [0, 1]")
        z = ndtri(uu)
        x, logdet = self.from_normal(z, with_logdet=True)
        logdet = logdet + 0.5 * (z * z).sum(-1) + 0.5 * self.dim * _LOG_2PI
        return _out(np.asarray(x), np.asarray(logdet), u_in.dtype, with_logdet)

    # -- helpers ----------------------------------------------------------------------------
    def _check_shape(self, arr: ArrayLike, name: str) -> np.ndarray:
        a = np.asarray(arr)
        if a.dtype.kind != "f":
            a = a.astype(np.float64)
        if a.ndim == 0 or a.shape[-1] != self.dim:
            raise ShapeError(f"{name} has shape {a.shape}; expected (..., {self.dim})")
        return a

    @staticmethod
    def _check_finite(x: np.ndarray, name: str) -> None:
        bad = ~np.isfinite(x)
        if bad.any():
            idx = np.argwhere(bad)[0]
            raise OutOfSupportError(
                f"{name}[..., {int(idx[-1])}]: value {x[tuple(idx)]} of sample "
                f"{tuple(int(i) for i in idx[:-1])} is not finite (support: all of ℝ)"
            )


def _finite_array(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{name}: expected numbers, got {value!r}") from err
    if not np.isfinite(arr).all():
        raise ConfigError(f"{name}: every value must be finite, got {value!r}")
    return arr


def _out(arr: np.ndarray, logdet: Any, dtype: np.dtype, with_logdet: bool):
    arr = np.asarray(arr).astype(dtype, copy=False)
    if not with_logdet:
        return arr
    logdet = np.broadcast_to(np.asarray(logdet, dtype=np.float64), arr.shape[:-1]).copy()
    return arr, logdet.astype(dtype, copy=False)
