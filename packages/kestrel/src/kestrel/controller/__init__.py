"""The launch loop as a controller: train every estimator while simulations keep arriving."""
