"""The gate itself (``kestrel_bench.gate``), on hand-written pytest-benchmark JSON: no timing."""

from __future__ import annotations

import json

import pytest

from kestrel_bench import gate


def _bench(group: str, role: str, n: int, median: float, **info) -> dict:
    extra = {"group": group, "role": role, "n": n, "device": "cpu", **info}
    return {"name": f"{group}-{role}-{n}", "extra_info": extra, "stats": {"median": median}}


def _passing() -> list[dict]:
    out = []
    for group, base, kestrel in (
        ("resolve", 20e-3, 1e-4),
        ("store", 2.0, 0.03),
        ("fetch", 0.1, 5e-3),
        ("apply_fetch", 0.05, 1e-3),
        ("sync", 0.1, 1e-5),
    ):
        for n in (256, 1024):
            out += [
                _bench(group, "baseline", n, base, baseline="naive"),
                _bench(group, "kestrel", n, kestrel),
            ]
    for group in ("training", "training_flow"):
        out += [
            _bench(group, "baseline", 2048, 0.64, baseline="tensors", steps=64),
            _bench(
                group,
                "kestrel",
                2048,
                0.70,
                steps=64,
                paired=[[0.64, 0.70], [0.60, 0.66], [0.7, 0.75]],
            ),
        ]
    return out


def _run(tmp_path, benchmarks, capsys) -> tuple[int, str, str]:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"benchmarks": benchmarks, "datetime": "now", "machine_info": {}}))
    code = gate.main([str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_passing_run_prints_one_row_per_pair_and_exits_0(tmp_path, capsys):
    code, out, err = _run(tmp_path, _passing(), capsys)
    assert code == 0, err
    assert "gate passed: 7 gated rows" in out
    table = out.split("Growth")[0]
    assert table.count("resolve ") == 2 and "200×" in table  # 20 ms / 0.1 ms at both N
    assert "steps/s" in out and "interleaved rounds" in out


def test_floor_applies_at_gate_n_only(tmp_path, capsys):
    benchmarks = _passing()
    benchmarks[1]["stats"]["median"] = 1e-3  # resolve at N=256: 20×, below 50× but not gated
    assert _run(tmp_path, benchmarks, capsys)[0] == 0
    benchmarks[3]["stats"]["median"] = 1e-3  # resolve at N=1024: 20×
    code, _, err = _run(tmp_path, benchmarks, capsys)
    assert code == 1 and "FAIL resolve N=1024" in err


def test_sync_is_gated_on_kestrels_absolute_time(tmp_path, capsys):
    benchmarks = _passing()
    sync = next(
        b
        for b in benchmarks
        if b["extra_info"]["group"] == "sync"
        and b["extra_info"]["n"] == 1024
        and b["extra_info"]["role"] == "kestrel"
    )
    sync["stats"]["median"] = 6e-3  # a 17× ratio would be fine, 6 ms of blocking is not
    code, _, err = _run(tmp_path, benchmarks, capsys)
    assert code == 1 and "FAIL sync" in err


def test_training_gates_the_median_of_paired_ratios(tmp_path, capsys):
    benchmarks = _passing()
    benchmarks[-1]["extra_info"]["paired"] = [[0.5, 0.7], [0.5, 0.7], [0.9, 0.7]]  # 0.71× paired
    code, _, err = _run(tmp_path, benchmarks, capsys)
    assert code == 1 and "FAIL training" in err  # although the unpaired medians give 0.91×


@pytest.mark.parametrize("group", list(gate.FLOORS))
def test_missing_gated_group_fails(tmp_path, capsys, group):
    benchmarks = [b for b in _passing() if b["extra_info"]["group"] != group]
    code, _, err = _run(tmp_path, benchmarks, capsys)
    assert code == 1 and f"FAIL {group}: no complete CPU measurement" in err


def test_unreadable_file_exits_2(tmp_path, capsys):
    assert gate.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_growth_exponents_are_the_log_log_slopes(tmp_path, capsys):
    from kestrel_bench._scaling import exponents

    benchmarks = [
        _bench("fetch", "baseline", n, 1e-4 * n, baseline="naive") for n in (256, 1024, 8192)
    ] + [_bench("fetch", "kestrel", n, 2e-3) for n in (256, 1024, 8192)]
    benchmarks += [_bench("store", "kestrel", 1024, 0.03)]  # one N: no exponent
    (growth,) = exponents(gate.rows_from({"benchmarks": benchmarks}))
    assert (growth.group, growth.sizes) == ("fetch", (256, 1024, 8192))
    assert growth.baseline == pytest.approx(1.0) and growth.kestrel == pytest.approx(0.0)
    _, out, _ = _run(tmp_path, _passing(), capsys)  # the gate prints them after its table
    assert "Growth of each cost with N" in out and "a = 0.00" in out and "b = 0.00" in out


def test_kestrels_exponent_spans_the_n_a_slow_baseline_skipped(tmp_path, capsys):
    """bench:scale runs the per-sample baselines at the small N only (test_06_scale.py)."""
    from kestrel_bench._scaling import exponents, render_exponents

    sizes = (8192, 16384, 32768, 65536)
    benchmarks = [_bench("store", "kestrel", n, 1e-5 * n) for n in sizes]
    benchmarks += [_bench("store", "baseline", n, 1e-3 * n, baseline="naive") for n in sizes[:2]]
    (growth,) = exponents(gate.rows_from({"benchmarks": benchmarks}))
    assert (growth.sizes, growth.baseline_sizes) == (sizes, sizes[:2])
    assert growth.kestrel == pytest.approx(1.0) and growth.baseline == pytest.approx(1.0)
    assert "b = 1.00 (8192–16384)" in render_exponents([growth])
    path = tmp_path / "scale.json"
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    assert gate.main([str(path)]) == 1  # gated groups missing: the gate fails …
    capsys.readouterr()
    assert gate.main([str(path), "--report"]) == 0  # … a report applies no floor
    out = capsys.readouterr().out
    assert "report only, no floors" in out and "FAIL" not in out and "a = 1.00" in out
