"""``kestrel import``: simulations made elsewhere brought into a run as its initial rows.

A campaign run on a supercomputer, or sbi's ``theta`` / ``x`` tensors saved with numpy, enter a
run folder that has not been launched yet (:func:`~kestrel.importing._import.import_simulations`,
``kestrel import -c CONFIG -o RUN theta=theta.npy x=x.npy``):

* :mod:`._sources` reads each node's array: a ``.npy`` file, ``FILE.npz:key``, or a folder of
  shards (``.npy`` files, or ``.npz`` files holding the node's key) concatenated in name order;
* :mod:`._rows` checks them in this process, without Ray: every node of the graph given, one
  row count, each node's per-sample shape as the dry run (or its observation) fixes it, no NaN
  or ±inf, the latent root nodes' rows inside their prior's support;
* :mod:`._layout` is where they go: ``RUN/import/NNNNNN.npz`` (one array per node, the layout
  ``buffer.initial_samples_path`` reads) with ``RUN/import/imports.json`` saying where each
  file came from; the run's ``config.yml`` names the folder (relative to the run).

A later ``kestrel launch -o RUN`` appends them as its initial rows and counts them as
simulations of ``budget.simulations`` (:mod:`kestrel.controller._budget`).

Importing this package imports neither Ray nor PyTorch.
"""
