"""The fit loop: epochs, validation, early stopping, pacing by rounds, the estimator's own randomness."""
