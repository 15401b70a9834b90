"""The graph of random variables: nodes, specs, topology, the dict trace, observations."""
