"""Checks before a launch starts Ray: config checks, the dry run, capacity, resume notes."""
