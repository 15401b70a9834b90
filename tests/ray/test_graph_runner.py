"""The two executors of one plan — DeployedGraph (Ray) and the application's LocalGraph — are
one :class:`kestrel_core.GraphRunner`: the same calls, the same draws, the same status shape."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel.session._local import LocalGraph
from kestrel_core import GraphRunner, ShapeError, Spec
from kestrel_core.internal import inference_plan
from kestrel_ray import DeployedGraph

from .fakes import SlowEstimator
from .helpers import chain_graph, estimator_graph, variant


def test_both_executors_are_graph_runners():
    graph = chain_graph(2)
    assert isinstance(DeployedGraph(graph, seed=0), GraphRunner)  # not deployed: no actor
    assert isinstance(LocalGraph(graph, 0), GraphRunner)
    assert not isinstance(object(), GraphRunner)


def test_rows_per_sample_give_the_same_draws_on_either(deployed):
    graph = chain_graph(2, chunk=2)  # n1 in chunks of 2 rows: the rows are cut per chunk
    rows = {"n0": np.arange(10.0).reshape(5, 2)}
    plan = [("n1", "sample")]
    runners: list[GraphRunner] = [deployed(graph, seed=3), LocalGraph(graph, 3)]
    got = [r.to_arrays(r.run(5, plan, rows=rows), ["n1.value"])["n1.value"] for r in runners]
    np.testing.assert_allclose(got[0], got[1])
    assert np.abs(got[0] - rows["n0"]).max() < 10  # n1 = n0 + N(0, 1): conditioned per row
    assert [r.run(0, plan, rows=rows).nodes() for r in runners] == [[], []]
    for runner in runners:
        with pytest.raises(ShapeError, match=r"rows of 'n0': .*4.* rows for 5 samples"):
            runner.run(5, plan, rows={"n0": rows["n0"][:4]})


def test_batched_posterior_rows_and_status_on_either(deployed):
    graph = estimator_graph(dim=2)
    rows = {"x": np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])}
    plan = inference_plan(graph, "sample_posterior", ["x"])
    runners: list[GraphRunner] = [deployed(graph, seed=1), LocalGraph(graph, 1)]
    for runner in runners:
        trace = runner.run(3, plan, rows=rows)
        value = runner.to_arrays(trace, ["theta.value"])["theta.value"]
        assert value[:, 0].tolist() == [1.0, 2.0, 3.0]  # each sample its own row of x
        status = runner.status()
        assert set(status) - {"_store"} == {"theta", "s", "x"}
        assert status["theta"]["estimator"]["seen_shapes"] == [{"x": (3, 2)}]


class GuardedEstimator(SlowEstimator):
    """Reports a ``far`` finding for each row of ``x`` whose first feature is above 2 (as the
    observation guards of kestrel_torch's estimators report them in their status)."""

    found: list = []

    def _draw(self, n, conditions):
        x = np.asarray(conditions["x"])
        self.found = [
            {"node": "theta", "kind": "far", "label": "x[0]", "row": i}
            for i in range(len(x))
            if x[i, 0] > 2
        ]
        return super()._draw(n, conditions)

    def status(self):
        return {**super().status(), "observation_checks": self.found}


def test_findings_come_back_with_the_draws_on_either(deployed):
    from kestrel.sample._guards import trace_findings

    graph = variant(estimator_graph(dim=2), theta={"estimator": Spec(GuardedEstimator)})
    plan = inference_plan(graph, "sample_posterior", ["x"])
    far = np.array([[1.0, 0.0], [3.0, 0.0], [3.0, 0.0]])
    runners: list[GraphRunner] = [deployed(graph, seed=1), LocalGraph(graph, 1)]
    for runner in runners:
        trace = runner.run(3, plan, rows={"x": far})
        assert [f["row"] for f in trace.findings["theta"]] == [1, 2]
        (note,) = trace_findings(trace, ["theta"])
        assert "far x[0] (observation row 1)" in str(note) and note.findings[0]["row"] == 1
        assert trace_findings(trace, ["theta"], [note]) == []  # known: not again
        assert runner.run(3, plan, rows={"x": np.zeros((3, 2))}).findings == {}
