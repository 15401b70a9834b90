"""``kestrel sample``: drawing samples of a run, observations given to it, the guards' findings."""
