"""The semi-public room of kestrel-core: what Kestrel's other packages build on.

These names are not part of kestrel-core's public API (:mod:`kestrel_core`) and may change
with any release; ``kestrel_ray``, ``kestrel_torch`` and the ``kestrel`` application import
them from here, never from a private module (as ``equinox.internal``).
"""

from kestrel_core._protocols import ESTIMATOR_FILE, OBSERVATION_CHECKS, observation_checks
from kestrel_core.config._diff import (
    MISSING,
    Change,
    array_digest,
    config_changes,
    describe_changes,
    text_digest,
)
from kestrel_core.config._instantiate import argument_problems
from kestrel_core.config._suggest import unknown
from kestrel_core.execute._blame import attached_traceback, user_traceback
from kestrel_core.execute._boundary import accepts_keyword, call_estimator
from kestrel_core.execute._forward import build_simulator
from kestrel_core.execute._onerror import (
    Attempt,
    SkipLog,
    format_full,
    print_report,
    simulate_or_skip,
    skipped_values,
)
from kestrel_core.execute._plan import (
    call_conditions,
    forward_plan,
    inference_plan,
    resimulation_plan,
)
from kestrel_core.files._atomic import read_estimator_file, write_atomic
from kestrel_core.files._diskfull import (
    DISK_FULL_ERRNOS,
    DiskFullError,
    as_disk_full,
    disk_full_guard,
    free_bytes,
)
from kestrel_core.files._npz import save_npz
from kestrel_core.graph._inputs import COMPLEX_HINT, as_input
from kestrel_core.graph._names import check_names, check_names_size
from kestrel_core.graph._observe import (
    check_finite_observation,
    fit_given_observation,
    split_observation_spec,
)
from kestrel_core.store._buffer_file import BUFFER_FILE
from kestrel_core.store._meta import Expected

__all__ = [
    "Attempt",
    "BUFFER_FILE",
    "COMPLEX_HINT",
    "Change",
    "DISK_FULL_ERRNOS",
    "DiskFullError",
    "ESTIMATOR_FILE",
    "Expected",
    "MISSING",
    "OBSERVATION_CHECKS",
    "SkipLog",
    "accepts_keyword",
    "argument_problems",
    "array_digest",
    "as_disk_full",
    "as_input",
    "attached_traceback",
    "build_simulator",
    "call_conditions",
    "call_estimator",
    "check_finite_observation",
    "check_names",
    "check_names_size",
    "config_changes",
    "describe_changes",
    "disk_full_guard",
    "fit_given_observation",
    "format_full",
    "forward_plan",
    "free_bytes",
    "inference_plan",
    "observation_checks",
    "print_report",
    "read_estimator_file",
    "resimulation_plan",
    "save_npz",
    "simulate_or_skip",
    "skipped_values",
    "split_observation_spec",
    "text_digest",
    "unknown",
    "user_traceback",
    "write_atomic",
]
