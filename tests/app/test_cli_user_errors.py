"""An exception raised in a user's simulator under ``kestrel simulate`` prints the user's frames
only (issue 9 item 5), status 1; ``--debug`` re-raises it."""

from __future__ import annotations

import pytest

from kestrel.cli import main

MODEL = """
class Boom:
    def simulate_batch(self, n, theta, rng):
        raise ValueError("theta too large")
"""
CONFIG = """
graph:
  theta:
    simulator: {_target_: kestrel_core.Product, priors: [[normal, 0.0, 1.0]]}
  x:
    simulator: {_target_: boom_model.Boom}
    parents: [theta]
"""


@pytest.fixture
def config(tmp_path):
    (tmp_path / "boom_model.py").write_text(MODEL)
    (tmp_path / "config.yml").write_text(CONFIG)
    return tmp_path / "config.yml"


def test_a_simulator_exception_shows_the_users_file_and_line_only(config, tmp_path, capsys):
    status = main(["simulate", "-c", str(config), "-n", "3", "-o", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert status == 1
    assert "kestrel simulate: error: ValueError: theta too large" in err
    assert f'File "{tmp_path / "boom_model.py"}", line 4, in simulate_batch' in err
    assert "_forward.py" not in err and "_cli.py" not in err  # no Kestrel frames
    assert "--debug" in err


def test_debug_shows_the_whole_traceback(config, tmp_path):
    with pytest.raises(ValueError, match="theta too large"):
        main(["--debug", "simulate", "-c", str(config), "-n", "3", "-o", str(tmp_path / "o.npz")])
