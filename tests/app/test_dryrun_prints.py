"""What a simulator prints in the dry run is not shown, unless it raises (then its last lines)."""

import sys

import pytest

from kestrel.preflight._dryrun import dry_run
from kestrel_core import Graph
from tests.app.test_reproducible import PRIOR


def graph(cls):
    x = {"_target_": f"{__name__}.{cls}"}
    return Graph().add_node("theta", PRIOR).add_node("x", x, parents=["theta"])


class Prints:
    def simulate_batch(self, n, theta, rng):
        for i in range(200):
            print(f"line {i}")
        print("progress", file=sys.stderr)
        return theta + rng.standard_normal(theta.shape)


class PrintsThenRaises:
    def simulate_batch(self, n, theta, rng):
        for i in range(100):
            print(f"step {i}")
        raise RuntimeError("diverged")


def test_a_printing_simulator_is_quiet_in_the_dry_run(capsys):
    dry_run(graph("Prints"))
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_a_simulator_that_raises_shows_its_last_printed_lines_before_the_error(capsys):
    with pytest.raises(Exception, match="diverged"):
        dry_run(graph("PrintsThenRaises"))
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [f"step {i}" for i in range(50, 100)]
