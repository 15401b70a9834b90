"""The sample-store contract: one abstract pytest class every store implementation runs.

Subclass :class:`StoreContract` once in a test module (the subclass's name must start with
``Test``) and provide two fixtures:

* ``make_store`` — a factory ``make_store(min_samples, max_samples, validation_samples, **kw)``
  returning an object whose methods are the :class:`kestrel_core.SampleStore` protocol, called
  synchronously. ``kw`` may hold ``snapshot_every``, ``snapshot_dir`` and ``seed``. The
  fixture owns cleanup.
* ``make_block`` — ``make_block(arrays: dict[str, ndarray]) -> block`` turns arrays of shape
  ``(n, *D)`` into what the store's ``append`` takes (the dict itself in memory, ObjectRefs in
  Ray); the contract passes ``BlockMeta.of(arrays, n)`` beside it.

Override :meth:`StoreContract.read_rows` when ``BlockRead.block[key]`` is not array-like, and
:meth:`StoreContract.warns` when the store's warnings are not raised in the calling process.

The contract: ids are assigned consecutively from 0 and never reused; statuses follow
``kestrel_core.rotate`` after every append; rows the metadata marks invalid get ids but are
never readable; one key schema per store; a block's data stays readable until every checkout
holding it is released, and only then are dead rows DELETED; every k-th sample is snapshot.
"""

from __future__ import annotations

from kestrel_core.testing._contract_lifecycle import LifecycleContract
from kestrel_core.testing._contract_reads import ReadContract
from kestrel_core.testing._contract_schema import SchemaContract

__all__ = ["StoreContract"]


class StoreContract(LifecycleContract, ReadContract, SchemaContract):
    """Abstract contract; subclasses supply ``make_store`` and ``make_block`` fixtures."""
