"""Node actors: the :class:`NodeWrapper` boundary, its replicas, and the driver's handles to them."""
