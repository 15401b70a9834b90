"""The run directory: its layout, written and read, sample files, run folder safety, the run's own config."""
