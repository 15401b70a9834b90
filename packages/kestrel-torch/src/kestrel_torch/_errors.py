"""The exceptions kestrel-torch raises: one place to import them from.

Every error derives from kestrel-core's :class:`~kestrel_core.KestrelError` family, so a caller
on the driver (which never imports torch) catches them by the kestrel-core names:

* :class:`~kestrel_core.ConfigError` — an estimator option, embedding or loader argument out of
  range; the message names the keyword (``GaussianPosterior(lr=-1.0): …``).
* :class:`~kestrel_core.EstimatorError` — the estimator cannot do what was asked (no trained
  model yet, a missing condition, no usable training row); the message names the node.
* :class:`CheckpointError` — a checkpoint cannot be written or read, or does not fit the
  estimator loading it (a subclass of :class:`~kestrel_core.EstimatorError`).
* :class:`~kestrel_core.StoreError` — the buffer handed the loader data it cannot cache.
"""

from __future__ import annotations

from kestrel_core import ConfigError, EstimatorError, KestrelError, StoreError

__all__ = ["KestrelError", "ConfigError", "EstimatorError", "CheckpointError", "StoreError"]


class CheckpointError(EstimatorError):
    """A checkpoint cannot be written or read, or was written by another estimator or node."""
