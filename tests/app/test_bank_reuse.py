"""The simulation bank and ``--reuse`` (issue 32 item 2), without Ray.

The bank: every append the journal writes stays on disk with its manifest line (origin, round,
prior or proposal, the simulator digest) and reads back by row range. The simulator digest
covers the nodes' simulator sections, parents and the simulators' code, not the estimators nor
the run folder. ``plan_reuse`` takes the matching rows of earlier runs, leaves out proposal rows
for an estimator without proposal correction, and refuses — before anything is written, one line
naming the folder, the file or the keys — an OLD that is not a run, has no bank, is damaged or
was simulated with another simulator, and ``--reuse`` into a run that holds rows of its own.
The runs here are written by hand (config, run.json, journal with a stand-in store).
"""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from kestrel.cli import main
from kestrel.persist._bank import MANIFEST_FILE, BankWriter, origin_of, read_bank
from kestrel.persist._digest import digest_changes, simulator_digest
from kestrel.persist._journal import JournalWriter
from kestrel.persist._reuse import plan_reuse
from kestrel.rundir._rundir import RunDir
from kestrel_core import BlockMeta, ConfigError, load_config

MODELS = "kestrel_core.testing.models"
LOG = logging.getLogger("test-bank")


class NoCorrection:
    """An estimator class that trains without a proposal correction (as flow matching)."""

    proposal_rows = False


def config(tmp_path, sigma=0.1, estimator="kestrel_torch.GaussianPosterior", **extra) -> dict:
    np.save(tmp_path / "obs.npy", np.array([0.3, -0.2]))
    cfg = {
        "buffer": {"min_samples": 8, "max_samples": 16, "validation_samples": 2},
        "budget": {"simulations": 40},
        "graph": {
            "z": {
                "simulator": {
                    "_target_": "kestrel_core.Product",
                    "priors": [["uniform", -1.0, 1.0]] * 2,
                },
                "evidence": ["x"],
                "estimator": {"_target_": estimator, "max_epochs": 2},
            },
            "x": {
                "simulator": {"_target_": f"{MODELS}.Noise", "sigma": sigma},
                "parents": ["z"],
                "observed": str(tmp_path / "obs.npy"),
            },
        },
        **extra,
    }
    return cfg


def loaded(data, root):
    return load_config(data, run_dir=root, check_targets=(), base_dir=os.fspath(root))


def rows(first: int, n: int, invalid=()) -> tuple[dict, np.ndarray]:
    ids = np.arange(first, first + n)
    arrays = {"z": np.stack([ids, -ids], 1).astype(float), "z.log_prob": -np.ones(n)}
    arrays["x"] = arrays["z"] + 0.5
    valid = np.ones(n, bool)
    valid[list(invalid)] = False
    return arrays, valid


def write_appends(cfg, root, appends, start=0) -> JournalWriter:
    """Journal ``appends`` ``[(what, n, invalid), …]`` into ``root``'s bank as a launch does."""
    run = RunDir(root, cfg)
    writer = JournalWriter(
        run.journal,
        LOG,
        bank=BankWriter(run.journal, simulator_digest(cfg, root), cfg.graph.latents),
    )
    store = SimpleNamespace(wait=lambda refs: refs)  # the "refs" are the arrays themselves
    first = start
    for what, n, invalid in appends:
        arrays, valid = rows(first, n, invalid)
        meta = BlockMeta.of(arrays, n, valid=None if valid.all() else valid)
        writer.write(store, [(arrays, meta)], np.arange(first, first + n), what)
        first += n
    return writer


def old_run(tmp_path, name="old", appends=None, **kw):
    """A finished run written by hand: config.yml, run.json and a bank."""
    root = tmp_path / name
    cfg = loaded(config(tmp_path, **kw), root)
    RunDir(root).write_config(cfg)
    appends = appends or [
        ("initial simulation", 10, ()),
        ("resimulation round 1", 4, (1,)),
        ("end-of-budget draws round 2", 4, ()),
    ]
    write_appends(cfg, root, appends)
    return root


def plan(tmp_path, old, new="new", fresh=False, extra=None, **kw):
    root = tmp_path / new
    cfg = loaded(config(tmp_path, **kw), root)
    return plan_reuse(cfg, RunDir(root, cfg), [old] if extra is None else extra, fresh=fresh)


def test_the_bank_keeps_every_append_with_its_origin_and_digest_and_reads_by_row_range(tmp_path):
    root = old_run(tmp_path)
    journal = RunDir(root).journal
    bank = read_bank(journal)
    assert bank is not None and not bank.unlisted and not bank.bad_lines and not bank.damaged()
    got = [
        (c.file, c.origin, c.round, c.from_prior, c.proposal_nodes, c.valid) for c in bank.chunks
    ]
    assert got == [
        ("0-9.npz", "initial simulation", None, True, (), 10),
        ("10-13.npz", "resimulation", 1, False, ("z",), 3),
        ("14-17.npz", "end-of-budget draws", 2, False, ("z",), 4),
    ]
    cfg = loaded(config(tmp_path), root)
    digest = simulator_digest(cfg, root)
    assert {c.digest for c in bank.chunks} == {digest.digest} and digest.digest in bank.digests
    assert bank.rows == 18 and bank.valid == 17
    part = bank.rows_between(8, 15, ["z"])  # two chunks of three read; id 11 appended invalid
    assert part["_ids"].tolist() == [8, 9, 10, 12, 13, 14]
    np.testing.assert_array_equal(part["z"][:, 0], part["_ids"])
    # a manifest line cut short by a crash: skipped, and the next line is whole
    with open(os.path.join(journal, MANIFEST_FILE), "a") as fh:
        fh.write('{"kind": "chunk", "file": "18-')
    write_appends(cfg, root, [("resimulation round 3", 1, ())], start=18)
    again = read_bank(journal)
    assert again is not None and len(again.bad_lines) == 1
    assert again.chunks[-1].file == "18-18.npz"


def test_origins_of_the_launch_appends():
    assert origin_of("initial samples", ["z"])["from_prior"] is True
    assert origin_of("resimulation round 7", ["z"]) == {
        "origin": "resimulation",
        "round": 7,
        "from_prior": False,
        "proposal_nodes": ["z"],
    }
    assert origin_of("end-of-budget draws round 9", ["z"])["origin"] == "end-of-budget draws"


def test_the_digest_ignores_estimators_and_the_run_folder_and_names_simulator_keys_and_code(
    tmp_path,
):
    a = simulator_digest(loaded(config(tmp_path), tmp_path / "a"), tmp_path / "a")
    other = config(tmp_path, estimator="kestrel_torch.FlowPosterior")
    other["graph"]["z"]["evidence"] = ["x"]
    b = simulator_digest(loaded(other, tmp_path / "b"), tmp_path / "b")
    assert a.digest == b.digest and digest_changes(a, b) == []
    c = simulator_digest(loaded(config(tmp_path, sigma=0.2), tmp_path / "c"), tmp_path / "c")
    assert [ch.key for ch in digest_changes(a, c)] == ["graph.x.simulator.sigma"]

    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text("def noise(z):\n    return z\n")
    data = config(tmp_path, paths={"imports": [str(code)]})
    data["graph"]["x"]["simulator"] = {"_target_": "model.Noise", "sigma": 0.1}
    before = simulator_digest(loaded(data, tmp_path / "d"), tmp_path / "d")
    (code / "model.py").write_text("def noise(z):\n    return z + 1\n")
    after = simulator_digest(loaded(data, tmp_path / "d"), tmp_path / "d")
    changes = digest_changes(before, after)
    assert [ch.key for ch in changes] == ["code of module 'model'"]
    assert "model.py sha256" in str(changes[0])


def test_reuse_takes_the_valid_rows_whose_digest_matches(tmp_path):
    old = old_run(tmp_path)
    got = plan(tmp_path, old)
    assert got is not None and got.rows == 17 and not got.notes
    assert [c.file for c in got.sources[0].chunks] == ["0-9.npz", "10-13.npz", "14-17.npz"]


def test_an_estimator_without_proposal_correction_gets_the_prior_rows_only(tmp_path):
    old = old_run(tmp_path)
    got = plan(tmp_path, old, estimator=f"{__name__}.NoCorrection")
    assert got is not None and got.rows == 10
    assert len(got.notes) == 1 and "7 rows" in got.notes[0] and "NoCorrection" in got.notes[0]
    assert "only rows drawn from the prior are reused" in got.notes[0]


def test_proposal_rows_that_drew_nodes_not_estimated_here_are_left_out(tmp_path):
    u = {"simulator": {"_target_": "kestrel_core.Product", "priors": [["uniform", 0.0, 1.0]]}}
    data = config(tmp_path)
    gaussian = {"_target_": "kestrel_torch.GaussianPosterior"}
    data["graph"]["u"] = {**u, "evidence": ["x"], "estimator": gaussian}
    old = tmp_path / "old"
    cfg = loaded(data, old)
    RunDir(old).write_config(cfg)
    write_appends(cfg, old, [("initial simulation", 10, ()), ("resimulation round 1", 4, (1,))])
    root = tmp_path / "new"
    cfg = loaded(config(tmp_path), root)
    with pytest.raises(ConfigError, match=r"graph\.u: .* → \(absent\)"):
        plan_reuse(cfg, RunDir(root, cfg), [old])  # another graph: another simulator
    data = config(tmp_path)
    data["graph"]["u"] = dict(u)  # the same simulators; u is not estimated here
    cfg = loaded(data, root)
    got = plan_reuse(cfg, RunDir(root, cfg), [old])
    assert got is not None and got.rows == 10
    assert "3 rows" in got.notes[0]
    assert "nodes ['u'] drawn by a proposal, not estimated here" in got.notes[0]


def test_another_simulator_is_refused_naming_the_key_and_the_remedy(tmp_path):
    old = old_run(tmp_path)
    with pytest.raises(ConfigError) as err:
        plan(tmp_path, old, sigma=0.3)
    line = str(err.value)
    assert "\n" not in line and str(old) in line
    assert "1 key differs (old → new): graph.x.simulator.sigma: 0.1 → 0.3" in line
    assert f"launch without --reuse {old}" in line
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("kind", ["missing", "not a run", "no bank", "damaged", "itself"])
def test_an_old_run_that_cannot_give_rows_is_one_line_naming_it(tmp_path, kind):
    old = tmp_path / "old"
    if kind == "not a run":
        old.mkdir()
        (old / "notes.txt").write_text("mine")
    elif kind == "no bank":
        old = old_run(tmp_path)
        os.remove(RunDir(old).journal + "/" + MANIFEST_FILE)
    elif kind == "damaged":
        old = old_run(tmp_path)
        os.remove(RunDir(old).journal + "/10-13.npz")
    with pytest.raises(ConfigError) as err:
        plan(tmp_path, old, new="old" if kind == "itself" else "new")
    line = str(err.value)
    assert "\n" not in line and line.startswith("reuse: ") and str(old) in line
    expected = {
        "missing": "does not exist",
        "not a run": "is not a Kestrel run (no run.json)",
        "no bank": "has no simulation bank",
        "damaged": "its bank is damaged: " + os.path.join(RunDir(old).journal, "10-13.npz"),
        "itself": "a run cannot reuse itself",
    }[kind]
    assert expected in line


def test_reuse_into_a_run_holding_rows_is_refused_and_a_resume_does_not_reuse_again(tmp_path):
    old = old_run(tmp_path)
    new = old_run(tmp_path, "new")  # holds rows of its own launches
    with pytest.raises(ConfigError, match="reused rows enter a run only as the initial rows"):
        plan(tmp_path, old)
    assert plan(tmp_path, old, fresh=True).rows == 17  # --restart: afresh from them
    # the config's reuse: on a resume is not applied again (its rows are in its own buffer)
    cfg = loaded(config(tmp_path, reuse=[str(old)]), new)
    resumed = plan_reuse(cfg, RunDir(new, cfg), [])
    assert resumed is not None and resumed.rows == 0 and "not applied" in resumed.notes[0]


def test_the_budget_must_leave_the_initial_simulation_after_the_reused_rows(tmp_path):
    old = old_run(tmp_path, appends=[("initial simulation", 3, ())])
    root = tmp_path / "new"
    data = config(tmp_path)
    data["budget"]["simulations"] = 6  # 3 reused + 7 of the initial 10 > 6
    cfg = loaded(data, root)
    with pytest.raises(ConfigError, match="the 3 reused rows leave 3, is smaller than the 7"):
        plan_reuse(cfg, RunDir(root, cfg), [old])


def test_the_config_key_reuse_is_relative_to_the_config_file(tmp_path):
    old_run(tmp_path)
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "config.yml"
    path.write_text(yaml.safe_dump(config(tmp_path, reuse=["../old"])))
    cfg = load_config(str(path), run_dir=tmp_path / "new", check_targets=())
    assert cfg.to_dict()["reuse"] == [str(tmp_path / "old")]
    got = plan_reuse(cfg, RunDir(tmp_path / "new", cfg))
    assert got is not None and got.rows == 17
    with pytest.raises(ConfigError, match="reuse: expected a list of run folders"):
        load_config({**config(tmp_path), "reuse": {"a": 1}}, check_targets=())


def test_cli_launch_reuse_of_a_folder_that_is_not_a_run_is_one_line_and_writes_nothing(
    tmp_path, capsys
):
    data = config(tmp_path)
    (tmp_path / "config.yml").write_text(yaml.safe_dump(data))
    new = tmp_path / "new"
    status = main(
        ["launch", "-c", str(tmp_path / "config.yml"), "-o", str(new), "--reuse", str(tmp_path)]
    )
    err = capsys.readouterr().err.strip()
    assert status == 1 and not new.exists()
    assert err.startswith("kestrel launch: error: reuse: ") and "\n" not in err, err
    assert f"{tmp_path} is not a Kestrel run" in err


def test_the_bank_manifest_is_json_lines_listing_file_ids_origin_and_digest(tmp_path):
    root = old_run(tmp_path, appends=[("initial simulation", 2, ())])
    with open(RunDir(root).journal + "/" + MANIFEST_FILE) as fh:
        records = [json.loads(line) for line in fh]
    assert [r["kind"] for r in records] == ["digest", "chunk"]
    assert set(records[0]) == {"kind", "digest", "graph", "code"}
    assert records[0]["graph"]["x"] == {
        "simulator": {"_target_": f"{MODELS}.Noise", "sigma": 0.1},
        "parents": ["z"],
    }
    chunk = records[1]
    assert chunk["file"] == "0-1.npz" and (chunk["first"], chunk["last"]) == (0, 1)
    assert chunk["origin"] == "initial simulation" and chunk["digest"] == records[0]["digest"]
    assert chunk["bytes"] == os.path.getsize(RunDir(root).journal + "/0-1.npz")
