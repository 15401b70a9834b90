"""Pure bookkeeping: chunk grids, columns and trace blocks."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import BlockMeta, SimulatorError, StoreError
from kestrel_ray import Column, RefTrace, chunk_grid
from kestrel_ray.graph._refs import split_chunks


@pytest.mark.parametrize("n", [0, 1, 3, 10, 1024])
@pytest.mark.parametrize(
    "plans", [[(0, 1)], [(100, 1)], [(0, 4)], [(3, 2), (0, 3)], [(7, 1), (5, 4)]]
)
def test_chunk_grid_refines_every_nodes_cuts(n, plans):
    grid = chunk_grid(n, plans)
    assert sum(grid) == n and all(c > 0 for c in grid)
    cuts = set(np.cumsum([0] + grid).tolist())
    for size, k in plans:
        edges = [int(i * n / k) for i in range(k)] + [n]
        assert set(edges) <= cuts  # every replica slice is a union of grid chunks
        if size:
            assert max(grid, default=0) <= size  # no chunk exceeds any node's chunk size


def test_split_chunks_cuts_at_the_range():
    assert split_chunks([4, 4, 2], 0, 10) == [4, 4, 2]
    assert split_chunks([4, 4, 2], 4, 8) == [4]
    assert split_chunks([4, 4, 2], 3, 9) == [1, 4, 1]


def test_column_slice_and_broadcast():
    col = Column.whole([("a", 3), ("b", 2)])
    assert col.n == 5 and col.refs == ["a", "b"]
    assert col.slice(2, 4).segments == (("a", 2, 3), ("b", 0, 1))
    assert col.slice(0, 0).n == 0
    one = Column.whole([("obs", 1)])
    assert one.is_broadcast(64) and not one.is_broadcast(1) and not col.is_broadcast(5)


def test_trace_blocks_need_shared_whole_blocks():
    meta = {"a.value": ((2,), "float64"), "b.value": ((), "float32")}
    trace = RefTrace(
        5,
        {
            "a.value": Column.whole([("r1", 3), ("r2", 2)]),
            "b.value": Column.whole([("s1", 3), ("s2", 2)]),
        },
        meta,
    )
    assert trace.blocks() == [
        (
            {"a.value": "r1", "b.value": "s1"},
            BlockMeta(3, {"a.value": ((3, 2), "float64"), "b.value": ((3,), "float32")}),
        ),
        (
            {"a.value": "r2", "b.value": "s2"},
            BlockMeta(2, {"a.value": ((2, 2), "float64"), "b.value": ((2,), "float32")}),
        ),
    ]
    trace.columns["b.value"] = Column.whole([("s", 5)])
    with pytest.raises(StoreError, match="same whole blocks"):
        trace.blocks()
    trace.columns["b.value"] = Column.whole([("s", 6)]).slice(1, 6)
    with pytest.raises(StoreError, match="same whole blocks"):
        trace.blocks()


def test_k09_trace_blocks_carry_the_valid_rows_of_every_node():
    meta = {"a.value": ((), "float64"), "b.value": ((), "float64")}
    columns = {
        "a.value": Column.whole([("r1", 3), ("r2", 2)]),
        "b.value": Column.whole([("s1", 3), ("s2", 2)]),
    }
    finite = {"a": np.array([1, 0, 1, 1, 1], bool), "b": np.array([1, 1, 1, 1, 0], bool)}
    trace = RefTrace(5, columns, meta, {"a": 1, "b": 1}, finite)
    assert trace.check_finite("round") == {"a": 1, "b": 1}
    (_, first), (_, second) = trace.blocks()
    assert first.valid.tolist() == [True, False, True] and second.valid.tolist() == [True, False]
    assert trace.select(["a.value"]).blocks()[1][1].valid.tolist() == [
        True,
        True,
    ]  # b's mask left with b
    clean = RefTrace(5, columns, meta, {"a": 0, "b": 0}, {m: np.ones(5, bool) for m in "ab"})
    assert all(m.valid is None for _, m in clean.blocks())


def test_k09_an_all_invalid_round_names_the_node():
    meta = {"a.value": ((), "float64"), "b.value": ((), "float64")}
    columns = {"a.value": Column.whole([("r", 2)]), "b.value": Column.whole([("s", 2)])}
    every = RefTrace(2, columns, meta, {"a": 2, "b": 0}, {"a": np.zeros(2, bool)})
    with pytest.raises(SimulatorError, match=r"node 'a'.*non-finite.*all 2 samples of the round"):
        every.check_finite("round")
    split = RefTrace(
        2,
        columns,
        meta,
        {"a": 1, "b": 1},
        {"a": np.array([0, 1], bool), "b": np.array([1, 0], bool)},
    )
    with pytest.raises(
        SimulatorError, match=r"no sample of the round is finite in every node.*node 'a'"
    ):
        split.check_finite("round")
