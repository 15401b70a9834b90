"""An estimator's training loss over buffer batches, apart from the estimator (the pairing of
lampe's ``NPE``/``NPELoss``, for every head: posterior flows, the Gaussian, flow matching, the
likelihood flow of NLE).

:class:`EstimatorLoss` is what the training loop (:func:`~kestrel_torch.train._fit.fit`)
minimises: it turns a :class:`~kestrel_torch.Batch` into finite rows in standard-normal space,
asks the model's head for its per-row terms (:meth:`~kestrel_torch.nets._head.PosteriorHead.loss`)
and reduces them to one number. Which loss that is — the APT atomic loss of the flow, the importance-weighted Gaussian
likelihood — is the head's business; this module does the bookkeeping around it:

* rows with a non-finite value are left out and counted (``nonfinite_rows``); a step whose loss
  is not finite is skipped and counted (``skipped_steps``);
* with ``discard_below`` set, a training sample whose ``log q(θ_i | x_i) − log_prob_i`` falls
  below it is marked DISFAVOURED in the buffer (``discarded``);
* the validation loss is computed over a whole set at once, in eval mode and without gradient,
  so it changes no state;
* heads with a closed-form refit get it at the end of each epoch.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from kestrel_torch.data._batch import Batch
from kestrel_torch.data._loader import CachedDataLoader
from kestrel_torch.data._rows import Columns, Rows
from kestrel_torch.nets._head import RefitRows, RowLoss
from kestrel_torch.nets._model import EstimatorModel
from kestrel_torch.train._rng import own_randomness, step_generator

__all__ = ["EstimatorLoss", "validation_reference"]

#: floor of the reference's variances, relative to their mean (a degenerate validation set)
_REFERENCE_JITTER = 1e-12


@torch.no_grad()
def validation_reference(chunks: Iterable[Rows]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The z-space mean ``(D,)`` and covariance ``(D, D)`` (float64) of validation rows, or
    ``None`` for fewer than two rows; the covariance gets a floor of ``1e-12`` × its mean
    variance on the diagonal, so it is positive definite for as few rows as there are."""
    zs = [r.z for r in chunks]
    if not zs:
        return None
    z = torch.cat(zs).to(torch.float64)
    if z.shape[0] < 2:
        return None
    mean = z.mean(0)
    centred = z - mean
    cov = centred.T @ centred / (z.shape[0] - 1)
    floor = _REFERENCE_JITTER * float(torch.diagonal(cov).mean().clamp_min(1e-300))
    eye = torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
    return mean, 0.5 * (cov + cov.T) + floor * eye


class EstimatorLoss:
    """The loss of a model (its head's per-row terms) on batches of one node's training data.

    Args:
        columns: the node's buffer columns.
        generator: torch generator on the training device, for the head's training randomness
            and for drawing refit rows; every training forward also runs with torch's global
            generators seeded from a stream derived from its seed
            (:func:`~kestrel_torch.train._rng.own_randomness`), so dropout in an embedding follows
            the estimator's seed.
        discard_below: threshold of ``log q(θ_i | x_i) − log_prob_i`` under which a training
            sample is marked DISFAVOURED, or ``None`` to discard nothing.

    Attributes:
        nonfinite_rows, skipped_steps, discarded: counters over the estimator's life.
    """

    def __init__(
        self, columns: Columns, generator: torch.Generator, discard_below: float | None
    ) -> None:
        self.columns = columns
        self.generator = generator
        self._steps = step_generator(generator)
        self.discard_below = discard_below
        self.nonfinite_rows = 0
        self.skipped_steps = 0
        self.discarded = 0

    def __call__(self, model: EstimatorModel, batch: Batch) -> torch.Tensor | None:
        """The training loss of ``batch``: a scalar with gradient, or ``None`` when the batch has
        no finite row or its loss is not finite (nothing to step on)."""
        finite, _ = self.columns.split(batch)
        n_ok = int(finite.sum())
        self.nonfinite_rows += len(batch) - n_ok
        if n_ok == 0:
            return None
        index = None if n_ok == len(batch) else torch.nonzero(finite).squeeze(1)
        rows = self.columns.rows(batch, index)
        with own_randomness(self._steps, self.generator.device):  # dropout & co.
            s = model.embed(rows.inputs)
            terms = model.head.loss(rows.z, s, rows.z_log_prob, self.generator)
        loss = terms.total()
        if not bool(torch.isfinite(loss)):
            self.skipped_steps += 1
            return None
        if self.discard_below is not None:
            low = ((terms.log_q.detach() + rows.logdet) - rows.log_prob) < self.discard_below
            mask = low if index is None else torch.zeros_like(finite).index_put((index,), low)
            self.discarded += batch.discard(mask)
        return loss

    @torch.no_grad()
    def evaluate(self, model: EstimatorModel | None, loader: CachedDataLoader) -> float | None:
        """The validation loss of ``model`` over every finite row the loader holds (e.g. the
        validation set), in eval mode; ``None`` without a model, rows or a finite row. Changes
        no state: no gradient, running statistics untouched, the model's mode restored.

        Each row is scored with :meth:`~kestrel_torch.nets._head.PosteriorHead.validation_loss`
        against the rows' own z-space Gaussian (:func:`validation_reference`), the same for every
        model evaluated on the same rows, so the losses of two models are comparable.
        """
        if model is None or loader.count == 0:
            return None
        chunks = list(self.columns.chunks(loader.all()))
        reference = validation_reference(chunks)
        was_training = model.training
        model.eval()
        try:
            parts = [
                model.head.validation_loss(r.z, model.embed(r.inputs), r.z_log_prob, reference)
                for r in chunks
            ]
        finally:
            model.train(was_training)
        return float(RowLoss.cat(parts).total()) if parts else None

    @torch.no_grad()
    def refit(self, model: EstimatorModel, loader: CachedDataLoader) -> None:
        """End-of-epoch closed-form refit of the head (if it has one, see
        :attr:`~kestrel_torch.nets._head.PosteriorHead.refit_rows`) on up to ``refit_rows`` training
        rows: all of them, or as many drawn with replacement."""
        head = model.head
        if not head.refit_rows:
            return
        size = head.refit_rows
        batch = loader.all() if loader.count <= size else loader.sample_batch(size, self.generator)
        was_training = model.training
        model.eval()
        try:
            head.refit(
                RefitRows(rows.z, model.embed(rows.inputs), rows.z_log_prob)
                for rows in self.columns.chunks(batch)
            )
        finally:
            model.train(was_training)
