"""Test helpers for code built on kestrel-core (needs pytest; never imported by ``kestrel_core``).

:class:`StoreContract` is the sample-store contract as an abstract pytest class: a store
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

from kestrel_core.testing._contract_base import KEYS, rows_for
from kestrel_core.testing._store_contract import StoreContract

__all__ = ["StoreContract", "KEYS", "rows_for"]
