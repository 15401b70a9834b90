"""Priors: a product of independent 1-D distributions, a correlated Gaussian, and their bijections."""
