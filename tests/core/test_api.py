"""Pins the public API of kestrel_core: a change here is a visible, reviewed diff."""

import kestrel_core

EXPECTED = [
    "__version__",
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
    "flat_key",
    "split_key",
    "flatten",
    "unflatten",
    "format_shapes",
    "check_trace",
    "Status",
    "rotate",
    "LIVE",
    "TRAINABLE",
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
    "c2st",
    "calibration_report",
    "binomial_band",
]


def test_all_is_pinned():
    assert kestrel_core.__all__ == EXPECTED


def test_every_public_name_exists_and_is_documented():
    for name in kestrel_core.__all__:
        obj = getattr(kestrel_core, name)
        if callable(obj) and name != "Record":
            assert obj.__doc__, f"kestrel_core.{name} has no docstring"


def test_error_hierarchy():
    for name in (
        "ConfigError",
        "GraphError",
        "SimulatorError",
        "ShapeError",
        "StoreError",
        "EstimatorError",
    ):
        assert issubclass(getattr(kestrel_core, name), kestrel_core.KestrelError)
    assert issubclass(kestrel_core.ShapeError, kestrel_core.SimulatorError)
    assert issubclass(kestrel_core.ConfigError, ValueError) and issubclass(
        kestrel_core.GraphError, ValueError
    )
