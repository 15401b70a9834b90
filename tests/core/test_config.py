"""load_config: YAML / mapping / DictConfig sources, overrides, run_dir, schema checks (K17)."""

import copy
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from kestrel_core import (
    BudgetConfig,
    BufferConfig,
    ConfigError,
    GraphError,
    KestrelError,
    PathsConfig,
    Product,
    RunConfig,
    SampleConfig,
    load_config,
)
from kestrel_core.testing import models

BASE = {
    "buffer": {"min_samples": 4, "max_samples": 8, "validation_samples": 2},
    "graph": {
        "theta": {
            "simulator": {
                "_target_": "kestrel_core.Product",
                "priors": [["uniform", 0.0, 1.0], ["normal", 0.0, 1.0]],
            },
            "evidence": ["x"],
            "scaffolds": ["mu"],
        },
        "mu": {"simulator": {"_target_": "model.Shift", "offset": 1.0}, "parents": ["theta"]},
        "x": {
            "simulator": {"_target_": "model.Noise", "sigma": 0.1},
            "parents": ["mu"],
            "observed": "data/obs.npy",
        },
    },
    "sample": {"posterior": {"n": 100}},
}


def write_run(tmp_path, config=None, *, obs=None):
    """config.yml + model.py + data/obs.npy in ``tmp_path``; returns the config path."""
    obs = np.zeros(2) if obs is None else obs
    (tmp_path / "model.py").write_text(Path(models.__file__).read_text())
    (tmp_path / "data").mkdir(exist_ok=True)
    np.save(tmp_path / "data" / "obs.npy", obs)
    path = tmp_path / "config.yml"
    text = config if isinstance(config, str) else yaml.safe_dump(config or BASE, sort_keys=False)
    path.write_text(textwrap.dedent(text))
    return path


def with_(**changes):
    """A deep copy of BASE with ``a__b__c=value`` set (``None`` deletes the key)."""
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        *parents, last = key.split("__")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def load(tmp_path, config=None, *args, **kwargs):
    return load_config(write_run(tmp_path, config), *args, **kwargs)


# --- loading --------------------------------------------------------------------------------


def test_yaml_config_loads_into_frozen_dataclasses(tmp_path):
    cfg = load(tmp_path)
    assert isinstance(cfg, RunConfig)
    assert cfg.buffer == BufferConfig(
        4,
        8,
        2,
        simulate_count=64,
        epochs_per_round=1,
        simulate_interval=0.0,
        simulate_when_full=True,
        snapshot_every=0,
        initial_samples_path=None,
    )
    assert cfg.budget == BudgetConfig(simulations=None, stop_early=False)
    assert cfg.deterministic is None
    assert cfg.base_dir == str(tmp_path)
    assert cfg.graph.forward_order == ["theta", "mu", "x"]
    assert cfg.graph.inference_order == ["x", "theta"]
    assert cfg.sample["posterior"] == SampleConfig(n=100)
    assert set(cfg.sample) == {"prior", "posterior", "proposal", "ppd"}
    assert cfg.sample["prior"].n is None
    with pytest.raises(AttributeError):
        cfg.run_dir = "elsewhere"


def test_targets_import_from_the_config_folder(tmp_path):
    cfg = load(tmp_path)
    assert cfg.paths.imports == (str(tmp_path),)
    noise = cfg.graph.nodes["x"].simulator.build()
    assert type(noise).__name__ == "Noise" and noise.sigma == 0.1
    assert sys.modules[type(noise).__module__].__file__ == str(tmp_path / "model.py")


def test_relative_observed_path_resolves_against_the_config_folder(tmp_path, monkeypatch):
    path = write_run(tmp_path, obs=np.array([1.0, 2.0]))
    monkeypatch.chdir("/")
    cfg = load_config(path)
    np.testing.assert_array_equal(cfg.graph.observations["x"], [1.0, 2.0])
    assert cfg.to_dict()["graph"]["x"]["observed"] == str(tmp_path / "data" / "obs.npy")


def test_interpolation_resolves(tmp_path):
    cfg = load(tmp_path, with_(graph__mu__simulator__offset="${graph.x.simulator.sigma}"))
    assert cfg.graph.nodes["mu"].simulator.kwargs == {"offset": 0.1}


def test_mapping_and_dictconfig_sources_are_not_modified(tmp_path):
    write_run(tmp_path)
    data = with_(graph__mu__simulator__offset="${graph.x.simulator.sigma}")
    data["paths"] = {"imports": [str(tmp_path)]}
    data["graph"]["x"]["observed"] = str(tmp_path / "data" / "obs.npy")
    before = copy.deepcopy(data)
    load_config(
        data, ["graph.x.simulator.sigma=0.5", "buffer.min_samples=5"], run_dir=str(tmp_path / "r")
    )
    assert data == before
    dc = OmegaConf.create(data)
    snapshot = OmegaConf.to_yaml(dc)
    cfg = load_config(dc, ["graph.x.simulator.sigma=0.5"])
    assert OmegaConf.to_yaml(dc) == snapshot
    assert cfg.graph.nodes["mu"].simulator.kwargs["offset"] == 0.5


def test_python_objects_in_a_mapping_source():
    obs = np.arange(3.0)
    cfg = load_config(
        {
            "graph": {
                "z": {"simulator": models.Gauss, "observed": obs},
                "w": {"simulator": models.Gauss(dim=2)},
            }
        }
    )
    assert cfg.graph.nodes["z"].simulator.target is models.Gauss
    np.testing.assert_array_equal(cfg.graph.observations["z"], obs)
    assert cfg.to_dict()["graph"]["z"]["observed"] == "<array shape (3,) float64>"
    assert cfg.to_dict()["graph"]["z"]["simulator"] == "kestrel_core.testing.models.Gauss"
    assert cfg.to_dict()["graph"]["w"]["simulator"].startswith(
        "<kestrel_core.testing.models.Gauss instance"
    )


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yml")
    (tmp_path / "bad.yml").write_text("graph: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yml")
    (tmp_path / "list.yml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(tmp_path / "list.yml")
    with pytest.raises(ConfigError, match="graph: required"):
        load_config({})


# --- overrides ------------------------------------------------------------------------------


def test_overrides_set_values_and_new_simulator_kwargs(tmp_path):
    cfg = load(
        tmp_path,
        None,
        [
            "graph.x.simulator.sigma=0.2",
            "buffer.simulate_count=32",
            "graph.x.parents=[theta]",
            "sample.ppd.n=7",
            "ray.num_cpus=2",
        ],
    )
    assert cfg.graph.nodes["x"].simulator.kwargs == {"sigma": 0.2}
    assert cfg.graph.nodes["x"].parents == ("theta",)
    assert cfg.buffer.simulate_count == 32
    assert cfg.sample["ppd"].n == 7
    assert cfg.ray == {"num_cpus": 2}


def test_override_adds_a_kwarg_to_a_string_simulator(tmp_path):
    cfg = load(tmp_path, with_(graph__x__simulator="model.Noise"), ["graph.x.simulator.sigma=0.3"])
    assert cfg.graph.nodes["x"].simulator.kwargs == {"sigma": 0.3}


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "buffer.max_sample=3",
            "buffer.max_sample: unknown key 'max_sample' (did you mean 'max_samples'?)",
        ),
        ("graph.thta.simulator.sigma=1", "graph.thta: unknown node 'thta' (did you mean 'theta'?)"),
        (
            "graph.x.parent=[mu]",
            "graph.x.parent: unknown node key 'parent' (did you mean 'parents'?)",
        ),
        (
            "graph.x.ray.num_gpu=1",
            "graph.x.ray.num_gpu: unknown Ray actor option 'num_gpu' (did you mean 'num_gpus'?)",
        ),
        ("sample.posterior.m=1", "sample.posterior.m: unknown key 'm'"),
        ("buffr.min_samples=1", "unknown top-level key 'buffr' (did you mean 'buffer'?)"),
        ("buffer.min_samples", "expected key=value"),
    ],
)
def test_override_of_an_unknown_key_is_an_error(tmp_path, override, expected):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, None, [override])
    assert expected in str(info.value)


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "graph.x.ray={resources:{sim:1}}",
            "the value is not valid YAML (while scanning a plain scalar); write a space after",
        ),
        ("graph.x.ray={num_gpus:2}", "key 'num_gpus:2' has no value; write a space after"),
        ("graph.x.simulator.sigma=[1,", "the value is not valid YAML"),
    ],
)
def test_k17_malformed_override_value_names_the_override(tmp_path, override, expected):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, None, [override])
    assert f"override {override!r}" in str(info.value) and expected in str(info.value)


def test_every_bad_override_is_reported_at_once(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, None, ["buffer.max_sample=3", "graph.y.simulator.s=1"])
    assert "buffer.max_sample" in str(info.value) and "graph.y" in str(info.value)


# --- run_dir and paths ----------------------------------------------------------------------


def test_run_dir_sets_path_defaults_and_interpolation(tmp_path):
    run = str(tmp_path / "run1")
    cfg = load(tmp_path, with_(paths={"samples": "${run_dir}/out"}), run_dir=run)
    assert cfg.run_dir == run
    assert cfg.paths == PathsConfig(f"{run}/graph", f"{run}/out", f"{run}/buffer", (str(tmp_path),))


def test_without_run_dir_paths_are_none_and_other_uses_fail(tmp_path):
    cfg = load(tmp_path)
    assert (cfg.run_dir, cfg.paths.graph, cfg.paths.samples, cfg.paths.buffer) == (
        None,
        None,
        None,
        None,
    )
    with pytest.raises(ConfigError, match=r"graph\.x\.simulator\.sigma: uses \$\{run_dir\}"):
        load(tmp_path, with_(graph__x__simulator__sigma="${run_dir}"))


def test_k15_reload_for_a_second_run_dir_writes_only_there(tmp_path):
    cfg1 = load(tmp_path, None, run_dir=str(tmp_path / "run1"))
    cfg2 = load_config(cfg1, run_dir=str(tmp_path / "run2"))
    assert cfg1.paths.graph == str(tmp_path / "run1" / "graph")
    assert all(
        p.startswith(str(tmp_path / "run2"))
        for p in (cfg2.paths.graph, cfg2.paths.samples, cfg2.paths.buffer)
    )


def test_imports_and_initial_samples_path_are_relative_to_the_config(tmp_path):
    cfg = load(
        tmp_path,
        with_(paths={"imports": [".", "lib"]}, buffer__initial_samples_path="samples/prior"),
    )
    assert cfg.paths.imports == (str(tmp_path), str(tmp_path / "lib"))
    assert cfg.buffer.initial_samples_path == str(tmp_path / "samples" / "prior")


def test_to_yaml_round_trips(tmp_path):
    cfg = load(tmp_path, None, ["graph.x.simulator.sigma=0.25"], run_dir=str(tmp_path / "run"))
    again = load_config(yaml.safe_load(cfg.to_yaml()))
    assert again.to_dict() == cfg.to_dict()
    assert again.graph.nodes["x"].simulator.kwargs == {"sigma": 0.25}
    assert again.buffer == cfg.buffer and again.paths == cfg.paths and again.sample == cfg.sample
    np.testing.assert_array_equal(again.graph.observations["x"], cfg.graph.observations["x"])


# --- sections -------------------------------------------------------------------------------


def test_buffer_section_is_optional_but_its_counts_are_required(tmp_path):
    assert load(tmp_path, with_(buffer=None)).buffer is None
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(buffer={"min_samples": 9, "max_samples": 8, "validation_samples": -1}))
    assert "buffer.validation_samples: expected an integer ≥ 0, found -1" in str(info.value)
    assert "buffer.min_samples: 9 is larger than buffer.max_samples 8" in str(info.value)
    with pytest.raises(ConfigError, match="buffer.max_samples: required"):
        load(tmp_path, with_(buffer__max_samples=None))


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("buffer__simulate_count", 0, "buffer.simulate_count: expected an integer ≥ 1"),
        ("buffer__simulate_interval", -1.0, "buffer.simulate_interval: expected seconds ≥ 0"),
        ("buffer__simulate_when_full", "yes", "buffer.simulate_when_full: expected true or false"),
        ("buffer__min_samples", True, "buffer.min_samples: expected an integer ≥ 0, found True"),
        ("ray", [1], "ray: expected a mapping"),
        ("logging", {"lvl": "INFO"}, "logging.lvl: unknown key 'lvl' (did you mean 'level'?)"),
        ("paths", {"sample": "s"}, "paths.sample: unknown key 'sample' (did you mean 'samples'?)"),
        (
            "sample",
            {"posterior": {"n": 1.5}},
            "sample.posterior.n: expected an integer ≥ 1 (the number of samples to draw; leave "
            "it out to draw none), found 1.5",
        ),
        (
            "sample",
            {"posterior": {"n": 0}},
            "sample.posterior.n: expected an integer ≥ 1 (the number of samples to draw; leave "
            "it out to draw none), found 0",
        ),
        (
            "sample",
            {"posteriors": {"n": 1}},
            "sample.posteriors: unknown sample mode 'posteriors' (did you mean 'posterior'?)",
        ),
        (
            "sample",
            {"posterior": {"exclude_keys": ["mu", "tehta"]}},
            "sample.posterior.exclude_keys[1]: unknown node 'tehta' (did you mean 'theta'?)",
        ),
        (
            "graph__x__parens",
            ["mu"],
            "graph.x.parens: unknown node key 'parens' (did you mean 'parents'?)",
        ),
        ("graph__x__num_actors", 0, "graph.x.num_actors: expected an integer ≥ 1, found 0"),
        ("graph__x__sample_chunk_size", 1.5, "graph.x.sample_chunk_size: expected an integer ≥ 0"),
        ("graph__x__parents", 3, "graph.x.parents: expected a list of node names"),
        ("graph__x__simulator", [1, 2], "graph.x.simulator: expected a '_target_' path"),
        (
            "graph__x__simulator",
            {"sigma": 1},
            "graph.x.simulator: a mapping needs a '_target_' key",
        ),
        ("graph__x__observed", "data/missing.npy", "graph.x.observed: observation file not found"),
    ],
)
def test_invalid_values_name_the_key_path(tmp_path, key, value, expected):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(**{key: value}))
    assert expected in str(info.value)


def test_sample_keys_accept_lists_and_comma_strings(tmp_path):
    cfg = load(
        tmp_path, with_(sample={"ppd": {"n": 3, "exclude_keys": "mu, x", "add_keys": ["theta"]}})
    )
    assert cfg.sample["ppd"] == SampleConfig(n=3, exclude_keys=("mu", "x"), add_keys=("theta",))


def test_logging_level_and_ray_mapping_are_kept(tmp_path):
    cfg = load(tmp_path, with_(logging={"level": "DEBUG"}, ray={"num_cpus": 2, "address": "auto"}))
    assert cfg.logging == {"level": "DEBUG"} and cfg.ray == {"num_cpus": 2, "address": "auto"}


@pytest.mark.parametrize("level", ["LOUD", 10, ["INFO"]])
def test_a_logging_level_that_is_not_a_level_name_is_refused(tmp_path, level):
    with pytest.raises(ConfigError, match=r"logging\.level: expected one of DEBUG, INFO, WARNING"):
        load(tmp_path, with_(logging={"level": level}))


def test_all_problems_are_reported_together(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(buffer__max_sample=1, graph__x__parens=["mu"], extra=1))
    text = str(info.value)
    assert text.startswith("3 problems in the config:")
    for path in ("buffer.max_sample", "graph.x.parens", "extra"):
        assert path in text


def test_graph_structure_errors_are_graph_errors(tmp_path):
    with pytest.raises(
        GraphError, match=r"graph: cycle in parents: theta -> x -> mu -> theta|cycle"
    ):
        load(tmp_path, with_(graph__theta__parents=["x"]))
    with pytest.raises(KestrelError, match=r"graph\.x\.y: node name 'x\.y' must be an identifier"):
        load_config({"graph": {"x.y": {"simulator": "model.Noise"}}}, check_targets=())


# --- targets --------------------------------------------------------------------------------


def test_simulator_kwarg_typo_is_caught_with_a_suggestion(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(graph__x__simulator__sigmaa=0.1))
    assert "graph.x.simulator.sigmaa: unexpected argument (did you mean 'sigma'?)" in str(
        info.value
    )


def test_missing_required_argument_and_nested_targets_are_checked(tmp_path):
    with pytest.raises(
        ConfigError, match=r"graph\.mu\.simulator: missing required argument 'scale'"
    ):
        load(
            tmp_path,
            with_(graph__mu__simulator={"_target_": "model.Needs"}, graph__x__parents=["theta"]),
        )
    nested = {
        "_target_": "model.Needs",
        "scale": 2,
        "inner": {"_target_": "model.Inner", "widht": 3},
    }
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(graph__mu__simulator=nested, graph__x__parents=["theta"]))
    assert "graph.mu.simulator.inner.widht: unexpected argument (did you mean 'width'?)" in str(
        info.value
    )


def test_unimportable_targets_name_the_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(
            tmp_path,
            with_(graph__x__simulator__name_="x", graph__mu__simulator={"_target_": "model.Shfit"}),
        )
    assert "graph.mu.simulator._target_: cannot import 'model.Shfit'" in str(info.value)
    assert "did you mean 'Shift'?" in str(info.value)


def test_estimator_targets_are_checked_only_when_asked(tmp_path):
    config = with_(
        graph__theta__estimator={
            "_target_": "model.Inner",
            "widht": 2,
            "embedding": {"_target_": "nowhere.Net", "_input_": ["x"]},
        }
    )
    cfg = load(tmp_path, config)  # the default checks simulators only
    assert cfg.graph.latents == ["theta"]
    assert cfg.graph.nodes["theta"].estimator.kwargs["embedding"]["_input_"] == ["x"]
    with pytest.raises(ConfigError) as info:
        load(tmp_path, config, check_targets=("simulator", "estimator"))
    assert "graph.theta.estimator.widht: unexpected argument (did you mean 'width'?)" in str(
        info.value
    )
    assert "nowhere" not in str(info.value)  # _input_ embedding specs are kestrel-torch's
    with pytest.raises(ConfigError, match="check_targets"):
        load(tmp_path, None, check_targets=("simulatr",))


def test_targets_are_not_imported_when_not_checked(tmp_path):
    cfg = load(tmp_path, with_(graph__x__simulator={"_target_": "nowhere.Sim"}), check_targets=())
    assert cfg.graph.nodes["x"].simulator.target == "nowhere.Sim"


# --- K17 ------------------------------------------------------------------------------------


def test_k17_buffer_key_typo(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(buffer__max_sample=1000))
    assert "buffer.max_sample: unknown key 'max_sample' (did you mean 'max_samples'?)" in str(
        info.value
    )


def test_k17_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match=r"num_epochs: unknown top-level key 'num_epochs'"):
        load(tmp_path, with_(num_epochs=10))


def test_k17_empty_sample_section_loads_but_sampling_requires_n(tmp_path):
    cfg = load(tmp_path, with_(sample={}))
    assert cfg.sample["posterior"] == SampleConfig()
    with pytest.raises(ConfigError, match=r"sample\.posterior\.n: required"):
        cfg.require_sample("posterior")
    assert load(tmp_path).require_sample("posterior").n == 100
    with pytest.raises(ConfigError, match="did you mean 'posterior'"):
        cfg.require_sample("posteriro")


def test_k17_node_ray_option_typo(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, with_(graph__x__ray={"num_gpu": 1}))
    assert (
        "graph.x.ray.num_gpu: unknown Ray actor option 'num_gpu' (did you mean 'num_gpus'?)"
        in str(info.value)
    )
    assert load(tmp_path, with_(graph__x__ray={"num_gpus": 0, "num_cpus": 1})).graph.nodes[
        "x"
    ].ray == {"num_gpus": 0, "num_cpus": 1}


def test_k17_prior_low_above_high_names_the_parameter(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(
            tmp_path,
            with_(graph__theta__simulator__priors=[["normal", 0.0, 1.0], ["uniform", 1.0, 0.0]]),
        )
    assert str(info.value).startswith("graph.theta.simulator.priors[1]")
    with pytest.raises(ConfigError, match=r"graph\.theta\.simulator\.priors\[0\]"):
        load(tmp_path, with_(graph__theta__simulator__priors=[["normal", 0.0, -1.0]]))
    assert isinstance(load(tmp_path).graph.nodes["theta"].simulator.build(), Product)


def test_k17_unknown_parent_with_suggestion(tmp_path):
    with pytest.raises(GraphError) as info:
        load(tmp_path, with_(graph__mu__parents=["thta"]))
    assert "graph.mu.parents[0]: unknown node 'thta' (did you mean 'theta'?)" in str(info.value)


def test_k17_nested_targets_are_instantiated(tmp_path):
    nested = {
        "_target_": "model.Needs",
        "scale": 2,
        "inner": {"_target_": "model.Inner", "width": 3},
    }
    cfg = load(tmp_path, with_(graph__mu__simulator=nested, graph__x__parents=["theta"]))
    sim = cfg.graph.nodes["mu"].simulator.build()
    assert type(sim.inner).__name__ == "Inner" and sim.inner.width == 3


def test_k17_errors_are_kestrel_errors_raised_before_anything_runs(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(models.Counting, "__init__", lambda self: built.append(1))
    with pytest.raises(KestrelError):
        load_config({"graph": {"c": {"simulator": models.Counting, "parents": ["nope"]}}})
    assert built == []


# --- budget and pacing (issue 14) ------------------------------------------------------------


@pytest.mark.parametrize(
    "section, value, expected",
    [
        ("budget", {"simulations": 0}, "budget.simulations: expected an integer ≥ 1"),
        ("budget", {"simulations": 2.5}, "budget.simulations: expected an integer ≥ 1"),
        ("budget", {"stop_early": "yes"}, "budget.stop_early: expected true or false"),
        ("budget", {"simulation": 10}, "budget.simulation: unknown key 'simulation'"),
        ("deterministic", "sometimes", "deterministic: expected true or false"),
    ],
)
def test_budget_and_deterministic_keys_are_checked(tmp_path, section, value, expected):
    base = load(tmp_path).to_dict()
    base[section] = value
    with pytest.raises(ConfigError) as info:
        load_config(base)
    assert expected in str(info.value)


def test_budget_loads_and_epochs_per_round_is_checked(tmp_path):
    base = load(tmp_path).to_dict()
    base["budget"] = {"simulations": 500}
    base["buffer"]["epochs_per_round"] = 3
    cfg = load_config(base)
    assert cfg.budget == BudgetConfig(simulations=500, stop_early=False)
    assert cfg.buffer.epochs_per_round == 3
    base["buffer"]["epochs_per_round"] = -1
    with pytest.raises(ConfigError, match=r"buffer\.epochs_per_round: expected an integer ≥ 0"):
        load_config(base)


def test_buffer_pace_names_how_rounds_are_spaced():
    base = {"min_samples": 10, "max_samples": 20, "validation_samples": 5}
    assert BufferConfig(**base).pace == "a round every 1 epochs"
    assert (
        BufferConfig(**base, epochs_per_round=2, simulate_interval=0.5).pace
        == "a round every 2 epochs, at least 0.5 s apart"
    )
    assert BufferConfig(**base, epochs_per_round=0, simulate_interval=0.05).pace == (
        "a round every 0.05 s"
    )
    assert BufferConfig(**base, epochs_per_round=0).pace == "rounds back to back"
