"""Estimator checkpoints: module state as bytes or files, and a training estimator's whole state."""
