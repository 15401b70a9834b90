"""Training data on the device: the cached loader, its background fetcher and staging, batches, rows."""
