"""The sample store, written once on metadata; one small module per concept.

=================  ===========================================================================
``_protocol``      the contract: :class:`BlockMeta`, ``SampleStore``, ``Checkout``, ``BufferView`` …
``_lifecycle``     sample statuses and the buffer rules as one pure function (:func:`rotate`)
``_rules``         the buffer values, checked; the note for an oversized append
``_meta``          the key schema and the check of a block's metadata against it
``_index``         ids, statuses, block addresses and pins (:class:`BlockIndex`), no data
``_snapshot``      which appended samples are saved, and how
``_buffer_file``   the whole buffer in one file: saved at a launch's end, restored on resume
``_journal``       every append on disk until a snapshot holds it (replayed on resume)
``_base``          :class:`BlockStore`: all of the above behind the ``SampleStore`` methods
``_memory``        :class:`InMemoryStore`: a ``BlockStore`` whose blocks hold numpy arrays
``_gather``        rows of a checkout into fresh arrays (every view reads through it)
``_view``          :class:`InMemoryBufferView`
``_disk``          a buffer beyond memory: blocks handed to the journal, read back by id range
=================  ===========================================================================

kestrel-ray's store actor is a ``BlockStore`` whose blocks hold ObjectRefs.
"""

from kestrel_core.store._base import Appended, BlockStore
from kestrel_core.store._buffer_file import (
    BUFFER_FILE,
    BufferSnapshot,
    read_buffer_file,
    take_snapshot,
    write_buffer_file,
)
from kestrel_core.store._disk import (
    CACHE_SHARE,
    STORAGE_MODES,
    DiskPolicy,
    JournalReader,
    OnDisk,
    journal_reader,
    resolve_on_disk,
)
from kestrel_core.store._gather import empty_spec, gather_rows, read_checkout, read_groups
from kestrel_core.store._index import BlockIndex
from kestrel_core.store._journal import (
    JOURNAL_DIR,
    JournalBlock,
    JournalFile,
    journal_files,
    read_journal_file,
    trim_journal,
    write_journal,
)
from kestrel_core.store._lifecycle import LIVE, TRAINABLE, Status, rotate
from kestrel_core.store._memory import InMemoryStore
from kestrel_core.store._meta import Expected, Schema, check_block, check_expected
from kestrel_core.store._protocol import (
    BlockMeta,
    BlockRead,
    BufferView,
    Checkout,
    Fetch,
    SampleStore,
)
from kestrel_core.store._rules import buffer_int, buffer_rules, oversized_note
from kestrel_core.store._snapshot import snapshot_rows, write_snapshots
from kestrel_core.store._view import InMemoryBufferView

__all__ = [
    "BlockMeta",
    "BlockRead",
    "Checkout",
    "SampleStore",
    "Fetch",
    "BufferView",
    "Status",
    "rotate",
    "LIVE",
    "TRAINABLE",
    "Schema",
    "Expected",
    "check_block",
    "check_expected",
    "buffer_int",
    "buffer_rules",
    "oversized_note",
    "BlockIndex",
    "snapshot_rows",
    "write_snapshots",
    "BUFFER_FILE",
    "BufferSnapshot",
    "take_snapshot",
    "write_buffer_file",
    "read_buffer_file",
    "JOURNAL_DIR",
    "JournalBlock",
    "JournalFile",
    "write_journal",
    "journal_files",
    "read_journal_file",
    "trim_journal",
    "BlockStore",
    "Appended",
    "InMemoryStore",
    "read_checkout",
    "gather_rows",
    "read_groups",
    "empty_spec",
    "InMemoryBufferView",
    "CACHE_SHARE",
    "STORAGE_MODES",
    "DiskPolicy",
    "JournalReader",
    "OnDisk",
    "journal_reader",
    "resolve_on_disk",
]
