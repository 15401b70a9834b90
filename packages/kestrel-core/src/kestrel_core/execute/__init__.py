"""Executing a graph: the planner (node calls, chunk grid, seeds), the in-process executor, the boundary to user code."""
