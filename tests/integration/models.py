"""An estimator that fails for the end-to-end tests (importable by the node actors); their
simulators are in :mod:`kestrel_core.testing.models`."""

from __future__ import annotations


class BrokenEstimator:
    """An estimator whose training raises (an actor error during training)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def setup(self, context):
        self.node = context.node

    async def train(self, view):
        raise ValueError("estimator exploded on purpose")

    def request_stop(self):
        pass

    def status(self):
        return {"state": "idle", "epoch": 0, "max_epochs": 1}
