"""One run directory opened by a command, and the Ray (or the local process) it runs on."""
