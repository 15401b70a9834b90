"""Experiment tracking: a launch's metrics in TensorBoard or MLflow as well as ``metrics.csv``.

The config's ``tracking`` section selects the trackers (``pip install 'kestrel[tracking]'``)::

    tracking:
      tensorboard: tb                 # event files in RUN/tb (tensorboard --logdir RUN/tb)
      mlflow:                         # an MLflow run per run folder
        tracking_uri: http://localhost:5000
        experiment: my-model

:class:`Tracker` is the interface (params once, scalars at a step, close);
:class:`TensorBoardTracker` and :class:`MLflowTracker` are its adapters;
:class:`LaunchTracking` is what a launch uses.
"""

from kestrel.tracking._launch import TRACKING_FILE, LaunchTracking, check_tracking
from kestrel.tracking._mlflow import MLflowTracker
from kestrel.tracking._tensorboard import TensorBoardTracker
from kestrel.tracking._tracker import Tracker, flatten_params

__all__ = [
    "Tracker",
    "TensorBoardTracker",
    "MLflowTracker",
    "LaunchTracking",
    "check_tracking",
    "flatten_params",
    "TRACKING_FILE",
]
