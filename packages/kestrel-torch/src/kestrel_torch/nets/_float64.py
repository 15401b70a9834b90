"""Float64 statistics that a module's dtype cast does not round.

Normalisation statistics (running means, variances, second moments) are kept in float64: data
near ``2.75e-3`` with a spread of ``1e-9`` lose their spread in float32 (its resolution there is
about ``2e-10``), and a mean rounded that much moves a posterior by a visible fraction of σ.
``module.to(torch.float32)``, ``.float()`` and ``.half()`` cast every floating buffer, so a
module holding such statistics derives from :class:`KeepFloat64`: its float64 buffers follow
``.to(device)`` but keep their dtype, and since ``load_state_dict`` copies into the existing
buffers, a save → load round trip into a freshly cast copy gives float64 statistics again.
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["KeepFloat64"]


class KeepFloat64(nn.Module):
    """Mixin: this module's own float64 buffers keep float64 through dtype casts.

    Parameters and other modules' buffers are cast as usual; only the buffers registered on
    the class that mixes this in (not its submodules) are kept.
    """

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        before = dict(self._buffers)
        out = super()._apply(fn, recurse)
        for name, old in before.items():
            new = self._buffers.get(name)
            if old is not None and new is not None and old.dtype != new.dtype:
                self._buffers[name] = old.to(device=new.device)
        return out
