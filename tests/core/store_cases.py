"""The case ids (CASES.md) of the store contract's tests, put into their names in tests/.

``kestrel_core.testing.StoreContract`` is package code and names its tests by behaviour;
:func:`with_case_ids` renames the ones that check a case, in a concrete test class, to
``test_<case>_<behaviour>`` so that ``-k k18`` and the cases file find them.
"""

from __future__ import annotations

from kestrel_core.testing import StoreContract

#: case id → contract tests that check it
CASES = {
    "k01": ("test_per_sample_shape_mismatch_rejected",),
    "k05": ("test_shape_change_between_blocks_refused",),
    "k06": (
        "test_missing_or_extra_key_rejected_and_nothing_stored",
        "test_restored_buffer_checked_against_schema",
    ),
    "k09": (
        "test_invalid_rows_get_ids_but_are_never_read",
        "test_a_block_of_invalid_rows_is_dropped_at_once",
        "test_snapshots_leave_invalid_rows_out",
    ),
    "k18": ("test_block_released_only_after_every_checkout_ends",),
    "k22": (
        "test_validation_zero_promotes",
        "test_discard_leaves_validation_and_deleted_unchanged",
        "test_oversized_append_warns",
    ),
}


def with_case_ids(cls: type) -> type:
    """Class decorator: each contract test listed in :data:`CASES` runs as ``test_<case>_…``."""
    for case, names in CASES.items():
        for name in names:
            setattr(cls, f"test_{case}_{name.removeprefix('test_')}", getattr(StoreContract, name))
            setattr(cls, name, None)  # shadows the inherited name: pytest collects it once
    return cls
