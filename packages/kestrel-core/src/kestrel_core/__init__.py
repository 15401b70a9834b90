"""Kestrel core: graph, dict trace, priors, config, in-process simulation, store contract.

Depends on numpy, OmegaConf and PyYAML only; importing it never imports ray or torch (nor
pytest: the store contract suite, :mod:`kestrel_core.testing`, is imported only on demand).
"""

__all__ = [
    "__version__",
    # errors
    "KestrelError",
    "ConfigError",
    "GraphError",
    "SimulatorError",
    "ShapeError",
    "StoreError",
    "EstimatorError",
    "OutOfSupportError",
    "CountError",
    "OutputTypeError",
    "ProgramError",
    "StoreWarning",
    "ObservationWarning",
    "ReproducibilityWarning",
    # trace
    "flat_key",
    "split_key",
    "flatten",
    "unflatten",
    "format_shapes",
    "check_trace",
    # lifecycle
    "Status",
    "rotate",
    "LIVE",
    "TRAINABLE",
    # protocols
    "Simulator",
    "Record",
    "SampleStore",
    "BlockMeta",
    "Checkout",
    "BlockRead",
    "BufferView",
    "Fetch",
    "Estimator",
    "EstimatorContext",
    "GraphRunner",
    # config and graph
    "load_config",
    "RunConfig",
    "BufferConfig",
    "BudgetConfig",
    "Rounds",
    "PathsConfig",
    "SampleConfig",
    "Graph",
    "Node",
    "Spec",
    "instantiate",
    "import_target",
    "load_observation",
    "check_observation",
    # priors, simulation, store
    "Product",
    "MultivariateNormal",
    "Program",
    "prior_from_spec",
    "seed_sequence",
    "spawn_rngs",
    "check_count",
    "call_simulator",
    "as_record",
    "finite_rows",
    "sample_forward",
    "InMemoryStore",
    "InMemoryBufferView",
    "BlockIndex",
    # diagnostics
    "c2st",
    "calibration_report",
    "binomial_band",
]

from kestrel_core.__about__ import __version__
from kestrel_core._errors import (
    ConfigError,
    CountError,
    EstimatorError,
    GraphError,
    KestrelError,
    OutOfSupportError,
    OutputTypeError,
    ProgramError,
    ReproducibilityWarning,
    ShapeError,
    SimulatorError,
    StoreError,
    StoreWarning,
)
from kestrel_core._protocols import (
    BlockMeta,
    BlockRead,
    BufferView,
    Checkout,
    Estimator,
    EstimatorContext,
    Fetch,
    GraphRunner,
    Record,
    SampleStore,
    Simulator,
)
from kestrel_core.config._config import (
    BudgetConfig,
    BufferConfig,
    PathsConfig,
    RunConfig,
    SampleConfig,
    load_config,
)
from kestrel_core.config._instantiate import import_target, instantiate
from kestrel_core.diagnostics._c2st import c2st
from kestrel_core.diagnostics._calibration import binomial_band, calibration_report
from kestrel_core.execute._boundary import as_record, call_simulator, check_count, finite_rows
from kestrel_core.execute._forward import sample_forward
from kestrel_core.execute._random import seed_sequence, spawn_rngs
from kestrel_core.execute._rounds import Rounds
from kestrel_core.graph._graph import Graph, Node, Spec
from kestrel_core.graph._observe import ObservationWarning, check_observation, load_observation
from kestrel_core.graph._trace import (
    check_trace,
    flat_key,
    flatten,
    format_shapes,
    split_key,
    unflatten,
)
from kestrel_core.priors._mvnormal import MultivariateNormal
from kestrel_core.priors._product import Product, prior_from_spec
from kestrel_core.program._program import Program
from kestrel_core.store import (
    LIVE,
    TRAINABLE,
    BlockIndex,
    InMemoryBufferView,
    InMemoryStore,
    Status,
    rotate,
)
