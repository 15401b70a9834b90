"""The sample store on Ray: the store actor, its driver handle, the loader's view, snapshots."""
