"""Batch: a mapping of flat key → tensor with ids and discard()."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kestrel_core import EstimatorError
from kestrel_torch import Batch

from .torchtest_helpers import ScriptedView


def make_batch(view=None, ids=(7, 3, 7, 9)):
    data = {"theta.value": torch.arange(8.0).reshape(4, 2), "x.value": torch.zeros(4, 5)}
    return Batch(np.array(ids, dtype=np.int64), data, view)


def test_mapping_protocol_and_length_is_batch_size():
    batch = make_batch()
    assert len(batch) == 4
    assert list(batch) == ["theta.value", "x.value"] == list(batch.keys())
    assert len(batch.keys()) == 2 and len(batch.items()) == 2
    assert "x.value" in batch and "y.value" not in batch
    assert batch.get("y.value") is None
    assert batch["theta.value"].shape == (4, 2)
    assert dict(batch)["x.value"] is batch["x.value"]
    assert batch.ids.dtype == np.int64 and batch.ids.tolist() == [7, 3, 7, 9]
    assert "B=4" in repr(batch)


def test_ids_may_stay_a_tensor_until_read():
    batch = Batch(torch.tensor([4, 5]), {"x.value": torch.zeros(2, 1)})
    assert batch.ids.dtype == np.int64 and batch.ids.tolist() == [4, 5]


def test_leading_dimension_checked():
    with pytest.raises(
        ValueError, match=r"'x.value' has shape \(3, 1\), expected leading dimension 2"
    ):
        Batch(np.array([1, 2]), {"x.value": torch.zeros(3, 1)})


@pytest.mark.parametrize("as_tensor", [False, True])
def test_discard_reports_selected_ids_once(as_tensor):
    view = ScriptedView([([], [], {})])
    batch = make_batch(view)
    mask = np.array([True, False, False, True])
    assert batch.discard(torch.from_numpy(mask) if as_tensor else mask) == 2
    assert len(view.discarded) == 1 and view.discarded[0].tolist() == [7, 9]


def test_discard_with_device_ids_and_mask():
    view = ScriptedView([([], [], {})])
    batch = Batch(torch.tensor([1, 2, 3]), {"x.value": torch.zeros(3, 1)}, view)
    batch.discard(torch.tensor([False, True, True]))
    assert view.discarded[0].tolist() == [2, 3]


def test_discard_nothing_calls_nothing():
    view = ScriptedView([([], [], {})])
    batch = make_batch(view)
    assert batch.discard(None) == 0
    assert batch.discard(np.zeros(4, dtype=bool)) == 0
    assert batch.discard(torch.zeros(4, dtype=torch.bool)) == 0
    assert view.discarded == []
    assert make_batch(None).discard(np.zeros(4, dtype=bool)) == 0


def test_discard_rejects_bad_masks_and_missing_view():
    batch = make_batch(ScriptedView([([], [], {})]))
    with pytest.raises(ValueError, match=r"bool of shape \(4,\)"):
        batch.discard(np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match=r"bool of shape \(4,\)"):
        batch.discard(torch.ones(4))
    with pytest.raises(ValueError, match=r"bool of shape \(4,\)"):
        batch.discard(np.array([1, 0, 0, 1]))
    with pytest.raises(EstimatorError, match="no store view"):
        make_batch(None).discard(np.ones(4, dtype=bool))
