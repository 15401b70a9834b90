"""Library embedding modules, for use as ``estimator.embedding._target_``.

* :class:`SignalProjection` — project noisy data onto the subspace the noiseless signal spans,
  learned online from a training-only scaffold.
* :class:`Flatten`, :class:`Concatenate` — small helpers for composing embeddings.
"""

from __future__ import annotations

import torch

from kestrel_torch.nets._embedding import concatenate
from kestrel_torch.nets._float64 import KeepFloat64
from kestrel_torch.nets._lazy import LazyBuffers

__all__ = ["SignalProjection", "Flatten", "Concatenate"]


class SignalProjection(KeepFloat64, LazyBuffers):
    """Project data onto the top principal subspace of the noise-free signal.

    Shape symbols: B batch size, D the flattened data size, K ``n_components``.

    Meant for a node whose data is ``x = signal + noise`` with a low-dimensional signal (the
    linear-regression example: ``x = Φθ + ε``, ``mu = Φθ``). With ``_input_: [x, mu]`` and
    ``mu`` declared a scaffold, training batches carry the noiseless ``mu``; this module keeps
    a running uncentred second moment ``M ≈ E[mu muᵀ]`` (D × D, float64) and its top-K
    eigenvectors ``V`` (D × K). The output ``x V`` keeps the part of ``x`` that can carry
    information about the parameters and drops the noise outside the signal subspace. At
    inference ``mu`` is ``None`` and only ``x V`` is computed.

    ``V`` starts as a random orthonormal basis. The first update takes the top-K eigenvectors
    of ``M`` (``torch.linalg.eigh``); later updates, every ``update_every`` training calls, run
    one step of orthogonal iteration ``V ← qr(M V)`` with column signs fixed, which follows
    the subspace without rotating or flipping a basis that is already right (eigenvectors of
    a degenerate ``M`` would be arbitrary at every refresh). ``M``, ``V`` and the counters are
    buffers, so the basis is saved, loaded and deep-copied with the module; ``M`` and ``V`` stay
    float64 whatever the module is cast to (:class:`~kestrel_torch.nets._float64.KeepFloat64`).

    Args:
        n_components: K, the output width.
        signal_input: fit on the second argument (the scaffold) when given; with ``False`` the
            basis is fitted on ``x`` itself (plain uncentred PCA).
        update_every: refresh the basis every this many training calls (≥ 1); 0: fit it
            once, on the first training call, and keep it (``M`` is then not accumulated
            further: a step saves the ``D × D`` update, 5 ms at D = 1000 and B = 128 on one
            CPU thread).
        momentum: floor of the weight of a new batch in ``M`` (the weight starts at
            ``B / samples seen``, a plain average, and never drops below this).
        seed: seed of the random initial basis.

    References:
        G. H. Golub and C. F. Van Loan, *Matrix Computations* (4th ed.), §8.2.4, orthogonal
        iteration.
    """

    _lazy_buffers = ("moment", "basis")
    moment: torch.Tensor
    basis: torch.Tensor
    seen: torch.Tensor
    calls: torch.Tensor

    def __init__(
        self,
        n_components: int,
        signal_input: bool = True,
        *,
        update_every: int = 8,
        momentum: float = 0.01,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if n_components < 1 or update_every < 0 or not 0.0 < momentum <= 1.0:
            raise ValueError(
                f"SignalProjection(n_components={n_components}, update_every={update_every}, "
                f"momentum={momentum}): expected n_components >= 1, update_every >= 0 "
                "(0: fitted once), 0 < momentum <= 1"
            )
        self.n_components, self.signal_input = int(n_components), bool(signal_input)
        self.update_every, self.momentum, self.seed = int(update_every), float(momentum), int(seed)
        self.register_buffer("moment", torch.empty(0, dtype=torch.float64))
        self.register_buffer("basis", torch.empty(0, dtype=torch.float64))
        self.register_buffer("seen", torch.zeros((), dtype=torch.int64))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        # host copies of (calls, seen): no device sync per step
        self._host: tuple[int, int] | None = (
            0,
            0,
        )

    def forward(self, x: torch.Tensor, signal: torch.Tensor | None = None) -> torch.Tensor:
        """Project ``x``: tensor ``(B, *S)`` with ``prod(S) = D`` → ``(B, K)`` in ``x``'s dtype."""
        flat = x.reshape(x.shape[0], -1)
        if self.basis.numel() == 0:
            self._initialise(flat.shape[1], flat.device)
        if self.training:
            fit = signal if self.signal_input else x
            if fit is not None:
                self._update(fit.detach().reshape(fit.shape[0], -1).to(torch.float64))
        return flat @ self.basis.to(flat.dtype)

    def _initialise(self, d: int, device: torch.device) -> None:
        if d < self.n_components:
            raise ValueError(
                f"SignalProjection: data has {d} features, fewer than n_components={self.n_components}"
            )
        generator = torch.Generator().manual_seed(self.seed)
        q, _ = torch.linalg.qr(
            torch.randn(d, self.n_components, dtype=torch.float64, generator=generator)
        )
        self.basis = q.to(device)
        self.moment = torch.zeros(d, d, dtype=torch.float64, device=device)

    @torch.no_grad()
    def _update(self, s: torch.Tensor) -> None:
        if self._host is None:  # after construction or a load: read the counters once
            self._host = (int(self.calls), int(self.seen))
        calls, seen = self._host
        if self.update_every == 0 and calls >= 1:  # fitted once: nothing will read M again
            return
        b = s.shape[0]
        weight = max(self.momentum, b / (seen + b))
        self.moment.mul_(1.0 - weight).addmm_(s.T, s, alpha=weight / b)
        calls, seen = calls + 1, seen + b
        self._host = (calls, seen)
        self.calls.fill_(calls)
        self.seen.fill_(seen)
        if calls == 1:
            _, vectors = torch.linalg.eigh(self.moment)
            self.basis.copy_(vectors[:, -self.n_components :].flip(-1))
        elif self.update_every and calls % self.update_every == 0:
            q, r = torch.linalg.qr(self.moment @ self.basis)
            signs = torch.sign(torch.diagonal(r))
            self.basis.copy_(q * torch.where(signs == 0, 1.0, signs))

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._host = None

    def extra_repr(self) -> str:
        return f"n_components={self.n_components}, signal_input={self.signal_input}, update_every={self.update_every}"


class Flatten(torch.nn.Module):
    """``(B, *S)`` → ``(B, prod(S))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)


class Concatenate(torch.nn.Module):
    """Flatten each input to ``(B, -1)`` and concatenate; ``None`` inputs (absent scaffolds) are skipped.

    Leading dimension 1 broadcasts; float64 if any input is float64, else float32.
    """

    def forward(self, *inputs: torch.Tensor | None) -> torch.Tensor:
        return concatenate(inputs)
