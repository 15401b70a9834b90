"""Diagnostics of a posterior estimator, numpy only: C2ST and the calibration maths (SBC ranks, coverage, TARP)."""
