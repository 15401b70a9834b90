"""A correlated Gaussian prior, ``θ ~ N(mean, cov)``: the prior of a latent root node.

It offers what :class:`~kestrel_core.Product` offers to estimators and the graph (``dim``,
``full_dim``, ``sample``/``simulate_batch``, ``log_prob``, ``to_normal``/``from_normal``,
``to_unit``/``from_unit``), with the whitening map ``z = L⁻¹(θ − mean)`` where ``L`` is the
lower Cholesky factor of ``cov`` — so standard-normal space is exactly the prior's own space.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kestrel_core._errors import ConfigError, OutOfSupportError, ShapeError
from kestrel_core.execute._boundary import check_count
from kestrel_core.priors._special import ndtr, ndtri

__all__ = ["MultivariateNormal"]

_LOG_2PI = float(np.log(2.0 * np.pi))


class MultivariateNormal:
    """``θ ~ N(mean, Σ)`` in ``D`` dimensions (every entry free, support ``ℝ^D``).

    ``Σ`` is given by exactly one of ``cov`` (``Σ`` itself), ``precision`` (``Σ⁻¹``) or
    ``scale_tril`` (the lower Cholesky factor ``L`` of ``Σ = L Lᵀ``), as in
    ``torch.distributions.MultivariateNormal``. Config::

        theta:
          simulator:
            _target_: kestrel_core.MultivariateNormal
            mean: [0.0, 0.0]
            cov: [[1.0, 0.8], [0.8, 1.0]]        # or precision: [[…]] or scale_tril: [[…]]

    Draws are ``mean + L z`` with ``z`` standard normal, so the three forms of one distribution
    give the same draws for the same generator, up to floating point (``L`` is computed from
    ``cov`` or ``precision`` by a Cholesky factorisation; a precision is never inverted as a
    whole). Computation is in float64; the bijections keep the floating dtype of their input
    (integers become float64), like :class:`~kestrel_core.Product`.

    Args:
        mean: the mean, shape ``(D,)``.
        cov: the covariance ``Σ``, shape ``(D, D)``, symmetric positive definite.
        precision: the precision ``Σ⁻¹``, shape ``(D, D)``, symmetric positive definite.
        scale_tril: ``L``, shape ``(D, D)``, lower triangular (zeros above the diagonal) with
            a positive diagonal.

    Attributes:
        mean, cov: float64 arrays ``(D,)`` and ``(D, D)`` (``cov`` computed as ``L Lᵀ`` when
            not given). precision, scale_tril: properties, float64 ``(D, D)``.

    Raises:
        ConfigError: none or more than one of ``cov``/``precision``/``scale_tril``; shapes
            that do not match, non-finite values, a ``cov``/``precision`` that is not
            symmetric positive definite, a ``scale_tril`` that is not lower triangular with a
            positive diagonal (each message names the argument).

    Example:
        >>> prior = MultivariateNormal([1.0, -1.0], [[4.0, 1.0], [1.0, 1.0]])
        >>> z = prior.to_normal(np.array([[1.0, -1.0]]))
        >>> z.tolist(), prior.from_normal(z).tolist()
        ([[0.0, 0.0]], [[1.0, -1.0]])
        >>> same = MultivariateNormal([1.0, -1.0], precision=[[1 / 3, -1 / 3], [-1 / 3, 4 / 3]])
        >>> bool(np.allclose(same.cov, prior.cov))
        True
    """

    def __init__(
        self,
        mean: ArrayLike,
        cov: ArrayLike | None = None,
        *,
        precision: ArrayLike | None = None,
        scale_tril: ArrayLike | None = None,
    ) -> None:
        given = {
            k: v
            for k, v in (("cov", cov), ("precision", precision), ("scale_tril", scale_tril))
            if v is not None
        }
        if len(given) != 1:
            found = " and ".join(given) if given else "none"
            raise ConfigError(
                "give exactly one of cov (the covariance), precision (its inverse) or "
                f"scale_tril (its lower Cholesky factor); found {found}"
            )
        ((form, value),) = given.items()
        mu = _finite_array("mean", mean)
        if mu.ndim != 1 or mu.size == 0:
            raise ConfigError(f"mean: expected a list of D numbers, got shape {mu.shape}")
        d = mu.size
        matrix = _finite_array(form, value)
        if matrix.shape != (d, d):
            raise ConfigError(
                f"{form}: expected a {d}×{d} matrix (mean has {d} entries), got shape "
                f"{matrix.shape}"
            )
        if form == "scale_tril":
            chol = _checked_tril(matrix)
        else:
            _check_symmetric(form, matrix)
            chol = _cholesky(form, matrix) if form == "cov" else _precision_to_tril(matrix)
        self.mean = mu
        self.cov = matrix if form == "cov" else chol @ chol.T
        self._form = form
        self._given = matrix
        self._chol = chol
        self._chol_inv = np.linalg.inv(chol)
        self._log_det_chol = float(np.log(np.diag(chol)).sum())
        self.dim = self.full_dim = d
        self.free = np.ones(d, dtype=bool)
        self.low = np.full(d, -np.inf)
        self.high = np.full(d, np.inf)

    @property
    def scale_tril(self) -> np.ndarray:
        """``L``, the lower Cholesky factor of ``cov``: float64 ``(D, D)`` (a copy)."""
        return self._chol.copy()

    @property
    def precision(self) -> np.ndarray:
        """``Σ⁻¹ = L⁻ᵀ L⁻¹``: float64 ``(D, D)`` (the ``precision`` given, if one was)."""
        if self._form == "precision":
            return self._given.copy()
        return self._chol_inv.T @ self._chol_inv

    def to_config(self) -> dict[str, Any]:
        """The config of this prior, in the form it was given: ``{"_target_":
        "kestrel_core.MultivariateNormal", "mean": [...], "<cov|precision|scale_tril>":
        [[...]]}`` (plain floats, exact in YAML); building it gives the same prior."""
        return {
            "_target_": "kestrel_core.MultivariateNormal",
            "mean": self.mean.tolist(),
            self._form: self._given.tolist(),
        }

    def __repr__(self) -> str:
        return f"MultivariateNormal(mean={self.mean.tolist()!r}, {self._form}={self._given.tolist()!r})"

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


def _check_symmetric(name: str, matrix: np.ndarray) -> None:
    scale = float(np.abs(matrix).max())
    if not np.allclose(matrix, matrix.T, rtol=1e-10, atol=1e-12 * scale):
        raise ConfigError(f"{name}: must be symmetric ({name}[i][j] == {name}[j][i])")


def _cholesky(name: str, matrix: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError as err:
        raise ConfigError(
            f"{name}: must be positive definite (its Cholesky factor failed)"
        ) from err


def _precision_to_tril(precision: np.ndarray) -> np.ndarray:
    """The lower Cholesky factor ``L`` of ``precision⁻¹``, without inverting ``precision``: with
    ``J`` the reversal permutation, ``J P J = F Fᵀ`` (Cholesky) gives ``P = U Uᵀ`` for the upper
    triangular ``U = J F J``, so ``P⁻¹ = U⁻ᵀ U⁻¹`` and ``L = U⁻ᵀ`` (lower, positive diagonal)."""
    flipped = _cholesky("precision", precision[::-1, ::-1])
    upper = flipped[::-1, ::-1]
    tril = np.linalg.solve(upper.T, np.eye(len(precision)))  # (Uᵀ)⁻¹ = U⁻ᵀ
    return np.tril(tril)  # exactly triangular (the solve leaves round-off zeros above)


def _checked_tril(matrix: np.ndarray) -> np.ndarray:
    if np.any(np.triu(matrix, 1) != 0.0):
        raise ConfigError(
            "scale_tril: must be lower triangular (every entry above the diagonal 0); give a "
            "full covariance as cov"
        )
    if not np.all(np.diag(matrix) > 0.0):
        raise ConfigError(
            "scale_tril: its diagonal must be positive (a Cholesky factor of a positive "
            "definite covariance)"
        )
    return matrix


def _out(arr: np.ndarray, logdet: Any, dtype: np.dtype, with_logdet: bool):
    arr = np.asarray(arr).astype(dtype, copy=False)
    if not with_logdet:
        return arr
    logdet = np.broadcast_to(np.asarray(logdet, dtype=np.float64), arr.shape[:-1]).copy()
    return arr, logdet.astype(dtype, copy=False)
