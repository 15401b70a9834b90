"""The standard normal CDF and quantile in float64, accurate in both tails, numpy only.

kestrel-core depends on numpy alone, which has no ``erfc``; these functions give the priors'
CDF route to standard-normal space (:meth:`kestrel_core.Product.to_normal`) the precision it
needs: :func:`ndtr` has a small *relative* error down to ``ndtr(-37) ≈ 5.7e-300``, and
:func:`ndtri` is refined against :func:`ndtr` so that ``ndtr(ndtri(u)) == u`` to a few ulp,
which is what makes the prior bijections round-trip to 1e-10.

References:
    P. J. Acklam, "An algorithm for computing the inverse normal cumulative distribution
    function" (2003): the rational initial approximation of :func:`ndtri`
    (relative error < 1.15e-9). E. Halley's third-order iteration refines it.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Z_MAX", "U_MIN", "ndtr", "ndtri", "log_phi"]

#: Latents of the standard-normal bijections are clipped to ``[-Z_MAX, Z_MAX]`` so that the
#: bounds of a bounded prior map to finite values in float32 and float64.
Z_MAX = 37.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
_erfc = np.frompyfunc(math.erfc, 1, 1)

# Acklam's coefficients: central region (a, b) and tails (c, d).
_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_B = (
    -5.447609879822406e01,
    1.615858368580409e02,
    -1.556989798598866e02,
    6.680131188771972e01,
    -1.328068155288572e01,
)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def ndtr(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF ``Φ(z) = erfc(-z/√2)/2``.

    Args:
        z: array of any shape; computed in float64.

    Returns:
        float64 array of the same shape; relative error ≲ 1e-13 for ``z ≥ -37``.
    """
    z = np.asarray(z, dtype=np.float64)
    return 0.5 * np.asarray(_erfc(-z * _SQRT1_2), dtype=np.float64)


def log_phi(z: np.ndarray) -> np.ndarray:
    """Log density of the standard normal, ``-z²/2 - log √(2π)`` (float64)."""
    z = np.asarray(z, dtype=np.float64)
    return -0.5 * z * z - _HALF_LOG_2PI


def _polyval(coef: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, coef[0])
    for c in coef[1:]:
        out = out * x + c
    return out


def _ndtri_lower(u: np.ndarray) -> np.ndarray:
    """Quantile for ``0 < u ≤ 0.5`` (float64), refined with two Halley steps against ndtr."""
    x = np.empty_like(u)
    tail = u < _P_LOW
    q = np.sqrt(-2.0 * np.log(u[tail]))
    x[tail] = _polyval(_C, q) / (_polyval(_D, q) * q + 1.0)
    q = u[~tail] - 0.5
    r = q * q
    x[~tail] = _polyval(_A, r) * q / (_polyval(_B, r) * r + 1.0)
    log_u = np.log(u)
    for _ in range(2):
        # r = (Φ(x) - u) / φ(x), with u/φ(x) formed in log space so deep tails do not overflow.
        rel = ndtr(x) / u - 1.0
        r = rel * np.exp(log_u + 0.5 * x * x + _HALF_LOG_2PI)
        x = x - r / (1.0 + 0.5 * x * r)
    return x


def ndtri(u: np.ndarray) -> np.ndarray:
    """Standard normal quantile ``Φ⁻¹(u)``: the inverse of :func:`ndtr`.

    Upper half values use the symmetry ``Φ⁻¹(u) = -Φ⁻¹(1 - u)``, where ``1 - u`` is exact.

    Args:
        u: array of any shape with values in ``[0, 1]``; computed in float64.

    Returns:
        float64 array of the same shape; ``±inf`` at ``u = 1``/``u = 0``, ``nan`` outside
        ``[0, 1]`` (callers clip first).
    """
    u = np.asarray(u, dtype=np.float64)
    flat = u.reshape(-1)
    out = np.full(flat.shape, np.nan)
    lower = (flat > 0.0) & (flat <= 0.5)
    upper = (flat > 0.5) & (flat < 1.0)
    out[lower] = _ndtri_lower(flat[lower])
    out[upper] = -_ndtri_lower(1.0 - flat[upper])
    out[flat == 0.0] = -np.inf
    out[flat == 1.0] = np.inf
    return out.reshape(u.shape)


#: Smallest tail probability the CDF route resolves; ``ndtr(-Z_MAX)`` (≈ 5.7e-300).
U_MIN = float(ndtr(np.array(-Z_MAX)))
