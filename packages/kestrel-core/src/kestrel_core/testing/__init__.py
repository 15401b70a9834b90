"""Test helpers for code built on kestrel-core (never imported by ``kestrel_core``).

:mod:`kestrel_core.testing.models` holds small numpy-only simulators and priors for tests
(``_target_: kestrel_core.testing.models.Noise``); importing it needs neither pytest nor
anything beyond kestrel-core's own dependencies.

:class:`StoreContract` is the sample-store contract as an abstract pytest class (needs pytest;
imported on first use, so that ``kestrel_core.testing.models`` does not import pytest): a store
implementation (in memory, on Ray, third-party) subclasses it once, supplies the
``make_store`` and ``make_block`` fixtures, and inherits every contract test::

    from kestrel_core.testing import StoreContract

    class TestMyStore(StoreContract):
        @pytest.fixture
        def make_store(self):
            return lambda min_samples, max_samples, validation_samples, **kw: MyStore(...)

        @pytest.fixture
        def make_block(self):
            return dict
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kestrel_core.testing._contract_base import KEYS, rows_for
    from kestrel_core.testing._store_contract import StoreContract

#: public name → the module that defines it; imported on first use (PEP 562): those modules
#: import pytest
_HOMES = {
    "StoreContract": "kestrel_core.testing._store_contract",
    "KEYS": "kestrel_core.testing._contract_base",
    "rows_for": "kestrel_core.testing._contract_base",
}
__all__ = ["StoreContract", "KEYS", "rows_for"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kestrel_core.testing' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
