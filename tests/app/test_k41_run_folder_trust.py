"""A run folder handed over by someone else runs no code from its config (K41, issue 30 item 5).

A run folder's ``config.yml`` may name only Kestrel's config classes and the code of the run's
code folders (``paths.imports``), checked before anything is imported, unless the user trusts
the run (``--trust``, ``trust=True``); its ``ray`` sections may not fetch or run code or join
another cluster. The run folders here are written as a launch records them (``config.yml``
and ``run.json``), then edited as someone else would.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig

import pytest
import yaml

from kestrel.cli import main
from kestrel.rundir._config import (
    load_run_config,
    portable_config,
    run_config_yaml,
    save_observations,
)
from kestrel.rundir._trust import config_trust, trusted_run
from kestrel.sample._sampling import sample_run
from kestrel_core import ConfigError, EstimatorError, load_config
from tests.core.model_folders import model_folder

PWNED = {"_target_": "os.system", "command": "touch PWNED"}
#: a module that leaves a mark when it is imported
CANARY = "import pathlib\npathlib.Path({mark!r}).write_text('imported')\ndef run(**kw):\n    pass\n"


def handed_over(tmp_path, module="k41_model", estimator="", model_lines=""):
    """A model folder ``m`` (``model_lines`` added to its module) and a run ``run`` of it, as a
    launch records the run."""
    m = model_folder(tmp_path / "m", module, estimator=estimator)
    with open(m / f"{module}.py", "a") as fh:
        fh.write(model_lines)
    run = tmp_path / "run"
    cfg = load_config(m / "config.yml", run_dir=run)
    run.mkdir()
    data = portable_config(cfg, run, save_observations(cfg, run))
    (run / "config.yml").write_text(run_config_yaml(data))
    (run / "run.json").write_text('{"launches": []}\n')
    return m, run


def edit(run, change):
    """Rewrite ``RUN/config.yml`` as someone else would: ``change(data)`` in place."""
    data = yaml.safe_load((run / "config.yml").read_text())
    change(data)
    (run / "config.yml").write_text(yaml.safe_dump(data, sort_keys=False))


def simulator(value):
    return lambda data: data["graph"]["x"].__setitem__("simulator", value)


def refusal(run, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        load_run_config(run, **kwargs)
    text = str(err.value)
    assert text.startswith(f"{run / 'config.yml'}: refused")
    assert "--trust" in text and "trust=True" in text
    return text


def test_k41_os_system_is_refused_naming_target_and_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, run = handed_over(tmp_path)
    edit(run, simulator(PWNED))
    text = refusal(run)
    assert "graph.x.simulator._target_: 'os.system'" in text and "\n" not in text
    with pytest.raises(ConfigError, match=r"'os\.system'"):  # the function `kestrel sample` calls
        sample_run(run, "posterior")
    assert not (tmp_path / "PWNED").exists()
    edit(run, simulator("os.system"))  # the plain-string form
    assert "graph.x.simulator: 'os.system'" in refusal(run)


def test_k41_nothing_is_imported_before_the_refusal(tmp_path, monkeypatch):
    """A module the config names outside Kestrel and the code folders is never imported, even
    when it is on sys.path and another target of the config is allowed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    mark = tmp_path / "imported.txt"
    (elsewhere / "k41_canary.py").write_text(CANARY.format(mark=str(mark)))
    monkeypatch.syspath_prepend(str(elsewhere))
    _, run = handed_over(tmp_path)
    edit(run, simulator({"_target_": "k41_canary.run"}))
    assert "'k41_canary.run'" in refusal(run, check_targets=("simulator",))
    assert not mark.exists() and "k41_canary" not in sys.modules


def test_k41_trust_lets_the_user_load_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were it ever run, the marker would be written here
    _, run = handed_over(tmp_path)
    edit(run, simulator(PWNED))
    assert load_run_config(run, trust=True).graph.nodes["x"].simulator.target == "os.system"
    with trusted_run(run):  # what --trust / trust=True of the entry points does
        load_run_config(run)
    with trusted_run(tmp_path / "another"):
        refusal(run)
    assert not (tmp_path / "PWNED").exists()  # loading builds nothing


def test_k41_the_runs_own_code_and_kestrels_classes_load(tmp_path):
    from tests.core.model_folders import GAUSSIAN

    m, run = handed_over(tmp_path, estimator=GAUSSIAN)
    cfg = load_run_config(run, check_targets=("simulator", "estimator"))
    assert cfg.graph.nodes["x"].simulator.target == "k41_model.Shift"
    assert cfg.paths.imports == (str(m),)
    edit(run, simulator({"_target_": "kestrel_core.testing.models.Noise", "sigma": 0.1}))
    load_run_config(run)
    embedding = {"_target_": "torch.nn.Linear", "in_features": 2, "out_features": 2}
    edit(run, lambda d: d["graph"]["z"]["estimator"].__setitem__("embedding", embedding))
    load_run_config(run)


@pytest.mark.parametrize(
    "target, says",
    [
        ("kestrel_core.import_target", "a function of kestrel_core"),
        ("kestrel_core.instantiate", "a function of kestrel_core"),
        ("kestrel_core.load_config", "a function of kestrel_core"),
        ("kestrel_core.Spec", "not one of Kestrel's config classes"),
        ("kestrel.main", "a function of kestrel.cli"),
        ("kestrel.launch", "a function of kestrel"),
        ("kestrel_core.testing.models.os.system", "of posix"),
        ("kestrel_core.testing.models.Path", "a class of pathlib"),
        ("kestrel_core.testing.models.CrashOnce", "writes files at a path"),
        ("kestrel_core.testing.models.KilledAt", "writes files at a path"),
        ("k41_model.os.system", "not a class or function of the run's code"),
        ("k41_model.Path", "defined in pathlib"),
    ],
)
def test_k41_callables_that_would_import_or_run_anything_are_refused(tmp_path, target, says):
    # the user's own model imports os and Path
    _, run = handed_over(tmp_path, model_lines="\nimport os\nfrom pathlib import Path\n")
    edit(run, simulator({"_target_": target}))
    text = refusal(run)
    assert f"graph.x.simulator._target_: {target!r}" in text and says in text


def test_k41_a_run_folder_carries_no_code(tmp_path):
    m, run = handed_over(tmp_path)
    (run / "code").mkdir()
    (run / "code" / "evil.py").write_text("class Sim:\n    pass\n")
    edit(run, lambda d: d["paths"].__setitem__("imports", ["${run_dir}/code"]))
    edit(run, simulator({"_target_": "evil.Sim"}))
    text = refusal(run)
    assert f"the code folder {run / 'code'} lies inside the run folder" in text
    # a code folder above the run reaches into it by a dotted path: still refused
    mark = tmp_path / "imported.txt"
    (run / "code" / "evil.py").write_text(CANARY.format(mark=str(mark)))
    edit(run, lambda d: d["paths"].__setitem__("imports", [str(tmp_path)]))
    edit(run, simulator({"_target_": "run.code.evil.run"}))
    assert "inside the run folder" in refusal(run) and not mark.exists()
    # no paths.imports at all: the run folder is not its code folder
    edit(run, lambda d: d["paths"].pop("imports"))
    edit(run, simulator({"_target_": "evil.Sim"}))
    (run / "evil.py").write_text(CANARY.format(mark=str(mark)))
    assert "(paths.imports: none)" in refusal(run) and not mark.exists()


def test_k41_a_folder_of_the_python_installation_is_no_code_folder(tmp_path):
    _, run = handed_over(tmp_path)
    stdlib = sysconfig.get_paths()["stdlib"]
    edit(run, lambda d: d["paths"].__setitem__("imports", [stdlib]))
    edit(run, simulator({"_target_": "shlex.split"}))
    assert "a folder of the Python installation" in refusal(run)


def test_k41_nested_and_interpolated_targets_are_checked(tmp_path):
    from tests.core.model_folders import GAUSSIAN

    _, run = handed_over(tmp_path, estimator=GAUSSIAN)
    edit(run, lambda d: d["graph"]["z"]["estimator"].__setitem__("embedding", dict(PWNED)))
    assert "graph.z.estimator.embedding._target_: 'os.system'" in refusal(run)
    _, run = handed_over(tmp_path / "again")
    edit(run, simulator({"_target_": "k41_model.Shift", "offset": {"_target_": "subprocess.run"}}))
    assert "graph.x.simulator.offset._target_: 'subprocess.run'" in refusal(run)
    edit(run, simulator({"_target_": "o${graph.x.simulator.rest}", "rest": "s.system"}))
    assert "'os.system'" in refusal(run)  # checked as the string it resolves to


def test_k41_ray_settings_that_fetch_run_or_connect_are_refused(tmp_path):
    _, run = handed_over(tmp_path)
    edit(run, lambda d: d.__setitem__("ray", {"num_cpus": 2, "address": "203.0.113.5:6379"}))
    text = refusal(run)
    assert "ray.address: not taken from a config that is not trusted" in text
    assert "give a cluster with --address" in text
    edit(run, lambda d: d.__setitem__("ray", {"runtime_env": {"pip": ["evil"]}}))
    assert "ray.runtime_env" in refusal(run)
    edit(run, lambda d: d.__setitem__("ray", {"num_cpus": 2}))
    edit(run, lambda d: d["graph"]["x"].__setitem__("ray", {"runtime_env": {"env_vars": {}}}))
    assert "graph.x.ray.runtime_env" in refusal(run)
    edit(run, lambda d: d["graph"]["x"].__setitem__("ray", {"num_cpus": 1}))
    assert load_run_config(run).ray == {"num_cpus": 2}
    assert load_run_config(tmp_path / "run", trust=True)  # the user's word lifts it


def test_k41_a_user_config_is_not_restricted_but_a_run_folders_given_as_c_is(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    m, run = handed_over(tmp_path)
    with open(m / "config.yml", "a") as fh:  # the user's own config may name anything
        fh.write("ray: {runtime_env: {env_vars: {A: '1'}}}\n")
    load_config(m / "config.yml")
    assert config_trust(m / "config.yml") == (True, None)
    edit(run, simulator(PWNED))
    assert config_trust(run / "config.yml") == (False, str(run / "config.yml"))
    assert main(["graph", "-c", str(run / "config.yml")]) == 1
    err = capsys.readouterr().err
    assert "'os.system'" in err and str(run / "config.yml") in err
    assert main(["graph", "-c", str(run / "config.yml"), "--trust"]) == 0
    assert not (tmp_path / "PWNED").exists()


def test_k41_entry_points_take_trust(tmp_path, monkeypatch):
    import kestrel
    from kestrel.check._calibrate import check_calibration
    from tests.core.model_folders import GAUSSIAN

    monkeypatch.chdir(tmp_path)  # were it ever run, the marker would be written here
    _, run = handed_over(tmp_path, estimator=GAUSSIAN)
    edit(run, simulator(PWNED))
    with pytest.raises(ConfigError, match=r"refused: graph\.x\.simulator\._target_: 'os\.system'"):
        kestrel.launch(None, run, progress=False)
    with pytest.raises(ConfigError, match="'os.system'"):
        check_calibration(run)
    with pytest.raises(ConfigError, match="'os.system'"):
        kestrel.sample_run(run, "posterior")
    # trust=True passes the check: what stops sampling now is the missing weights
    with pytest.raises(EstimatorError, match="no saved weights"):
        kestrel.sample_run(run, "posterior", n=3, trust=True)
    assert not (tmp_path / "PWNED").exists()


def test_k41_kestrel_sample_refuses_and_writes_no_marker(tmp_path):
    _, run = handed_over(tmp_path)
    edit(run, simulator(PWNED))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-m", "kestrel", "sample", "posterior", "-o", str(run)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(tmp_path),
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert "os.system" in done.stderr and str(run / "config.yml") in done.stderr
    assert "--trust" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "PWNED").exists() and not (run / "PWNED").exists()


def test_k41_modules_the_user_trusts_in_the_environment_are_allowed(monkeypatch):
    from kestrel_core.config._trust import untrusted_problems

    data = {"graph": {"x": {"simulator": {"_target_": "json.JSONDecoder"}}}}
    monkeypatch.delenv("KESTREL_TRUSTED_MODULES", raising=False)
    (problem,) = untrusted_problems(data, [])
    assert "'json.JSONDecoder'" in problem and "KESTREL_TRUSTED_MODULES" in problem
    monkeypatch.setenv("KESTREL_TRUSTED_MODULES", " json , other.pkg")
    assert untrusted_problems(data, []) == []
    # a prefix is a module path, not a string prefix: 'js' does not trust 'json'
    monkeypatch.setenv("KESTREL_TRUSTED_MODULES", "js")
    assert untrusted_problems(data, [])


def test_k41_what_the_user_overrides_is_the_users_own(tmp_path):
    _, run = handed_over(tmp_path)
    # the user's own override of a setting a run folder's file may not hold: taken
    load_run_config(run, ["ray.address=127.0.0.1:6379"], trust=False)
    # the same setting in the file: refused, and an override does not launder the file
    edit(run, lambda d: d.setdefault("ray", {}).__setitem__("address", "127.0.0.1:6379"))
    assert "ray.address" in refusal(run, trust=False)
    edit(run, simulator(PWNED))
    with pytest.raises(ConfigError, match="os.system"):
        load_run_config(run, ["graph.x.simulator.command=true"], trust=False)


def test_k41_targets_a_command_does_not_build_are_not_imported(tmp_path):
    _, run = handed_over(tmp_path)
    mark = tmp_path / "imported.txt"
    (tmp_path / "m" / "k41_unbuilt.py").write_text(CANARY.format(mark=str(mark)))
    edit(run, lambda d: d["graph"]["z"].__setitem__("estimator", {"_target_": "k41_unbuilt.run"}))
    # sampling the prior builds no estimator: its target is checked as a name, never imported
    load_run_config(run, trust=False, check_targets=("simulator",))
    assert not mark.exists()
    with contextlib.suppress(ConfigError):  # building the estimator imports it (and checks it)
        load_run_config(run, trust=False, check_targets=("simulator", "estimator"))
    assert mark.exists()
