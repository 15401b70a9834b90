"""A graph on Ray actors, driven with ObjectRefs only: :class:`DeployedGraph` and its ref-only traces."""
