"""``--epochs N`` (N more than the saved weights have) with a ``max_epochs`` override (a total)
is refused, naming both, before anything is written."""

from __future__ import annotations

import pytest

from kestrel import launch
from kestrel.preflight._launch_notes import check_epochs_overrides
from kestrel_core import ConfigError

from .test_launch_refusals import a_run
from .test_rundir import contents


def test_epochs_with_a_max_epochs_override_is_refused_naming_both(tmp_path):
    with pytest.raises(ConfigError, match=r"--epochs 2 and the override .*max_epochs=3"):
        check_epochs_overrides(["graph.theta.estimator.max_epochs=3"], 2)
    check_epochs_overrides(["graph.theta.estimator.max_epochs=3"], None)
    check_epochs_overrides(["graph.theta.estimator.lr=0.1"], 2)
    run = a_run(tmp_path, rows=False)
    before = contents(run.root)
    with pytest.raises(ConfigError, match="--epochs 2 and the override"):
        launch(None, run.root, overrides=["graph.z.estimator.max_epochs=3"], epochs=2)
    assert contents(run.root) == before
