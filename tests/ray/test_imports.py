"""A node actor imports the config's model from the shipped copy of the config's folder, not a
module of the same name that comes first on ``sys.path`` (a ``model.py`` in the folder the
driver ran from). The same on a real cluster: ``tests/integration/test_real_cluster.py``."""

from __future__ import annotations

import sys

import pytest

from kestrel_core import ConfigError, Spec
from kestrel_ray.cluster._imports import SHIPPED_FROM_VAR, local_spec


@pytest.fixture
def no_model_module(monkeypatch):
    """``model`` is not imported before the test and is forgotten after it."""
    monkeypatch.delitem(sys.modules, "model", raising=False)
    yield
    sys.modules.pop("model", None)


def test_the_shipped_copy_wins_over_a_model_py_first_on_sys_path(
    tmp_path, monkeypatch, no_model_module
):
    driver_folder = tmp_path / "driver" / "my_model"  # the driver's path: absent here
    copy = tmp_path / "unpacked"  # Ray's unpacked working_dir, the actor's working directory
    copy.mkdir()
    (copy / "model.py").write_text("class Signal:\n    where = 'shipped copy'\n")
    decoy = tmp_path / "elsewhere"
    decoy.mkdir()
    (decoy / "model.py").write_text("where = 'another project'\n")
    monkeypatch.syspath_prepend(str(decoy))
    monkeypatch.chdir(copy)
    monkeypatch.setenv(SHIPPED_FROM_VAR, str(driver_folder))

    spec = Spec("model.Signal", {}, (str(driver_folder),))
    # the driver's own paths name nothing here: the decoy is imported instead
    with pytest.raises(ConfigError, match="'model' has no attribute 'Signal'"):
        spec.build()
    # mapped onto the copy, which then replaces the decoy already imported
    assert local_spec(spec).imports == (str(copy),)
    assert local_spec(spec).build().where == "shipped copy"


def test_without_a_shipped_folder_the_spec_is_unchanged(monkeypatch):
    monkeypatch.delenv(SHIPPED_FROM_VAR, raising=False)
    spec = Spec("model.Signal", {}, ("/some/folder",))
    assert local_spec(spec) == spec
    assert local_spec(Spec("model.Signal")) == Spec("model.Signal")
