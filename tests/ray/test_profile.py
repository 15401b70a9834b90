"""RUN/profile.json (issue 12 item 1): the driver's parts, the estimators' training parts and
the actors' busy time add up, and render as a Markdown table."""

from __future__ import annotations

import json

from kestrel.report._profile import LaunchProfile, main, profile_rows, summary, write_profile


def statuses():
    timings = {
        "steps": {"seconds": 6.0, "count": 300},
        "validation": {"seconds": 2.0, "count": 20},
    }
    return {
        "z": {
            "replica": 0,
            "samples": 64,
            "seconds": {"sample_proposal": 0.5},
            "estimator": {"epoch": 10, "timings": timings},
        },
        "x": [
            {"replica": 0, "samples": 500, "seconds": {"simulate": 4.0, "inputs": 1.0}},
            {"replica": 1, "samples": 500, "seconds": {"simulate": 2.0}},
        ],
        "_store": {"rows": 5},
    }


def test_parts_add_up_to_the_wall_and_shares_are_of_it():
    profile = LaunchProfile(t_start=100.0)
    profile.add("preflight", 1.0)
    profile.add("ray_start", 2.0)
    profile.enter("starting", now=103.0)
    profile.enter("initial simulation", now=104.0)
    profile.enter("training", now=106.0)
    profile.enter("saving", now=114.0)
    profile._since = 114.0
    built = profile.build(statuses(), ["z"])
    driver = built["driver"]
    assert list(driver) == [
        "preflight",
        "ray_start",
        "starting",
        "initial simulation",
        "training",
        "saving",
    ]
    assert driver["training"]["seconds"] == 8.0 and driver["initial simulation"]["seconds"] == 2.0
    wall = built["wall_s"]
    assert abs(sum(v["seconds"] for v in driver.values()) - wall) < 1e-6
    assert driver["training"]["share"] == round(8.0 / wall, 4)
    z = built["estimators"]["z"]
    assert z["epochs"] == 10 and z["steps_per_s"] == 50.0  # 300 steps in 6 s
    assert z["parts"]["validation"]["count"] == 20
    x = built["actors"]["x"]
    assert [r["replica"] for r in x] == [0, 1]
    # busy share: simulate over the time simulations could run (initial + training: 10 s)
    assert x[0]["busy_share"] == 0.4 and x[1]["busy_share"] == 0.2
    assert "_store" not in built["actors"]
    line = summary(built)
    assert "training 8.0 s" in line and "50.0 steps/s" in line and "x simulating 40 %, 20 %" in line


def test_a_profile_without_actor_statuses_has_the_driver_parts(tmp_path, capsys):
    profile = LaunchProfile(t_start=0.0)
    profile.add("preflight", 0.5)
    built = profile.build({}, ["z"])
    assert built["estimators"] == {} and built["actors"] == {}
    write_profile(str(tmp_path), built)
    assert json.loads((tmp_path / "profile.json").read_text())["driver"]["preflight"]
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["| part | seconds | share of wall |", "|---|---|---|"]
    assert main([str(tmp_path / "nothing")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_rows_name_every_part():
    profile = LaunchProfile(t_start=0.0)
    profile.add("training", 10.0)
    rows = profile_rows(profile.build(statuses(), ["z"]))
    text = "\n".join(rows)
    for part in (
        "| training |",
        "z: steps",
        "z: validation",
        "x replica 1: simulate",
        "x replica 0: inputs",
        "z replica 0: sample_proposal",
        "**wall**",
    ):
        assert part in text, part


def test_an_estimator_that_did_not_train_has_no_steps_per_second():
    """A resumed launch with nothing left to train printed ``None steps/s``."""
    quiet = statuses()
    quiet["z"]["estimator"] = {"epoch": 10, "timings": {"cache_fill": {"seconds": 0.0, "count": 1}}}
    built = LaunchProfile(t_start=0.0).build(quiet, ["z"])
    assert built["estimators"]["z"]["steps_per_s"] is None
    assert "None" not in summary(built) and "steps/s" not in summary(built)
    assert "None" not in "\n".join(profile_rows(built))
