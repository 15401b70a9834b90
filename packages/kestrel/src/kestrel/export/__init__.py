"""``kestrel export``: a run's samples for the tools scientists already use."""
